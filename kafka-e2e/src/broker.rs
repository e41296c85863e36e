//! A tansu broker as a child process, for the tests that stop one.
//!
//! Listens on 127.0.0.1 only, stores in memory (`memory://tansu/`), and is
//! killed when the [`Broker`] is dropped — also when a test panics. Its pid
//! is written to `$KAFKA_E2E_PIDS/<pid>` when that directory is set, so
//! that `kafka-e2e/run` can kill it on its way out even if this process was
//! killed first.

use crate::kafka;
use crate::Error;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The tansu binary: `$KAFKA_E2E_TANSU`, else `tansu` on the `PATH`.
pub fn tansu_binary() -> PathBuf {
    std::env::var_os("KAFKA_E2E_TANSU").map_or_else(|| PathBuf::from("tansu"), PathBuf::from)
}

/// A running broker.
pub struct Broker {
    child: Child,
    port: u16,
    pid_file: Option<PathBuf>,
}

impl Broker {
    /// Starts tansu on a free port of 127.0.0.1 and waits (with a deadline)
    /// until it answers a metadata request. Its output goes to `log`.
    pub fn start(tansu: &Path, log: &Path) -> Result<Broker, Error> {
        // Ask the kernel for a free port; tansu binds it right after.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Self::start_on(tansu, port, log)
    }

    /// Starts tansu on `port` of 127.0.0.1 and waits until it is ready.
    pub fn start_on(tansu: &Path, port: u16, log: &Path) -> Result<Broker, Error> {
        let url = format!("tcp://127.0.0.1:{port}");
        let out = File::options().create(true).append(true).open(log)?;
        let child = Command::new(tansu)
            .arg("broker")
            .args(["--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| Error::Other(format!("starting {}: {e}", tansu.display())))?;
        let pid_file = std::env::var_os("KAFKA_E2E_PIDS")
            .map(|dir| Path::new(&dir).join(child.id().to_string()));
        if let Some(file) = &pid_file {
            std::fs::write(file, "")?;
        }
        let broker = Broker {
            child,
            port,
            pid_file,
        };
        kafka::wait_ready(&broker.address(), Duration::from_secs(60))?;
        Ok(broker)
    }

    /// `127.0.0.1:<port>`, for `bootstrap.servers`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the process (SIGSTOP): its port still accepts connections
    /// but nothing is answered, as with a broker that hangs. Its data, in
    /// memory, stays.
    pub fn pause(&self) -> Result<(), Error> {
        self.signal("STOP")
    }

    /// Lets a paused broker go on (SIGCONT).
    pub fn resume(&self) -> Result<(), Error> {
        self.signal("CONT")
    }

    fn signal(&self, name: &str) -> Result<(), Error> {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Other(format!(
                "kill -{name} {}: {status}",
                self.child.id()
            )))
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill(); // SIGKILL ends a stopped process too
        let _ = self.child.wait();
        if let Some(file) = &self.pid_file {
            let _ = std::fs::remove_file(file);
        }
    }
}
