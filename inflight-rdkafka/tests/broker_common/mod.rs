//! What the tests against a real broker share (`broker.rs`,
//! `offset_topic_broker.rs`): its address, a client configuration, names
//! no earlier run used, and a minimal executor for the admin client.
#![allow(dead_code)] // each test file uses a different part

use rdkafka::config::ClientConfig;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// The broker's address, from `KAFKA_E2E_BROKERS` (`kafka-e2e/run` sets it).
pub fn brokers() -> String {
    std::env::var("KAFKA_E2E_BROKERS").expect("set KAFKA_E2E_BROKERS to a broker's address")
}

/// A client of that broker that gives up connecting after 2 s.
pub fn config() -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers())
        .set("socket.connection.setup.timeout.ms", "2000")
        .set("log_level", "3");
    config
}

/// A name no earlier run used (the broker may live across runs).
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

/// Runs `future` on this thread to its end.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}
