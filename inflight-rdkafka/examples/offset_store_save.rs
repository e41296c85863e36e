//! The cost of a save per commit on `KafkaOffsetStore`: the median (and
//! 90th percentile) time of a save that moves 1 and 64 source partitions,
//! each waited for until every record is delivered (`acks=all`).
//!
//! ```text
//! cargo run -p inflight-rdkafka --release --example offset_store_save              # librdkafka's mock cluster
//! cargo run -p inflight-rdkafka --release --example offset_store_save -- HOST:PORT # a broker (tansu, Kafka)
//! ```

use inflight::store::OffsetStore;
use inflight_rdkafka::KafkaOffsetStore;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const SAVES: usize = 200;
const WARM_UP: usize = 20;

fn main() {
    let broker = std::env::args().nth(1);
    // Kept alive for the whole run when there is no broker.
    let mut mock: Option<MockCluster<'static, DefaultProducerContext>> = None;
    let (servers, on) = match &broker {
        Some(address) => (address.clone(), format!("the broker at {address}")),
        None => {
            let cluster = MockCluster::new(1).expect("mock cluster");
            let servers = cluster.bootstrap_servers();
            mock = Some(cluster);
            (servers, "librdkafka's mock cluster".to_string())
        }
    };
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &servers)
        .set("log_level", "3");
    for partitions in [1_u32, 64] {
        let topic = format!(
            "offset-store-save-{}-{partitions}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        if let Some(cluster) = &mock {
            cluster.create_topic(&topic, 1, 1).expect("mock topic");
        }
        let mut store: KafkaOffsetStore<u32, u64> =
            KafkaOffsetStore::builder(&config, &topic, "bench")
                // The mock answers no CreateTopics / DescribeConfigs.
                .check_topic(broker.is_some())
                .open()
                .expect("store");
        let mut times = Vec::with_capacity(SAVES);
        for round in 0..(WARM_UP + SAVES) as u64 {
            let offsets: HashMap<u32, u64> = (0..partitions).map(|p| (p, round)).collect();
            let started = Instant::now();
            store.save(&offsets).expect("save");
            if round >= WARM_UP as u64 {
                times.push(started.elapsed());
            }
        }
        let loaded = store.load().expect("load");
        assert_eq!(loaded.len(), partitions as usize);
        assert!(loaded.values().all(|&o| o == (WARM_UP + SAVES) as u64 - 1));
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "offset-store save on {on}: {partitions:>2} partitions per save: median {:.2} ms, p90 {:.2} ms ({SAVES} saves)",
            ms(times[times.len() / 2]),
            ms(times[times.len() * 9 / 10]),
        );
    }
}
