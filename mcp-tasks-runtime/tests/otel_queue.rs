//! The span queue of the `otel` feature with no collector: every finished span is either
//! dropped at the full queue or fails its export, and each is counted; making spans never
//! waits for the collector.
#![cfg(feature = "otel")]

use mcp_tasks_runtime::otel::{OtelConfig, Protocol, dropped_spans};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt as _;

#[test]
fn spans_a_collector_never_gets_are_dropped_and_counted() {
    // Nothing listens on port 9 of the loopback: every export fails.
    let mut config = OtelConfig::new("http://127.0.0.1:9", Protocol::HttpProtobuf);
    config.max_queue_size = 8;
    config.max_export_batch_size = 4;
    config.scheduled_delay = Duration::from_millis(10);
    config.export_timeout = Duration::from_secs(1);
    config.metrics = false;
    let guard = config.start().expect("start the export");
    let before = dropped_spans();
    const SPANS: u64 = 2000;
    let subscriber = tracing_subscriber::registry().with(guard.layer());
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..SPANS {
            tracing::info_span!("request", n = i).in_scope(|| {});
        }
    });
    // Flushing exports (and fails) what is still queued; each span is counted once.
    let deadline = Instant::now() + Duration::from_secs(30);
    while dropped_spans() - before < SPANS && Instant::now() < deadline {
        guard.flush();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(dropped_spans() - before, SPANS);
    drop(guard);
}
