//! What every example shares: ending quietly when its output is closed.

/// Makes the process exit (status 0) when a write to stdout fails because
/// the reader went away (`cargo run --example death_spiral | head`), from
/// whichever thread prints. Without it `println!` panics in that thread,
/// and an example whose other threads wait for the printer never ends.
pub fn exit_when_stdout_closes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") {
            std::process::exit(0);
        }
        default(info);
    }));
}
