//! The metrics, after the OpenTelemetry semantic conventions for MCP where they speak
//! (`mcp.server.operation.duration`) and in this crate's `mcp_tasks.` namespace where they
//! are silent (tasks, the queue, leases).
//!
//! They are recorded once [`record_metrics`](super::record_metrics) ran (which
//! [`OtelConfig::start`](super::OtelConfig::start) does when it exports metrics), with the
//! global meter provider of that moment.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, UpDownCounter};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether the metrics are recorded: off until [`enable`] (so a process that exports none
/// pays nothing for them on its request path).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Records the metrics from now on, with the global meter provider.
pub(crate) fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// The instruments, when the metrics are recorded.
pub(crate) fn enabled() -> Option<&'static Instruments> {
    ENABLED.load(Ordering::Relaxed).then(get)
}

/// The bucket boundaries the conventions advise for MCP operation durations, in seconds.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

pub(crate) struct Instruments {
    /// `mcp.server.operation.duration`: from a request's arrival to its answer.
    pub(crate) operation: Histogram<f64>,
    /// `mcp_tasks.task.run.duration`: one run of a task's tool, on the process that ran it.
    pub(crate) run: Histogram<f64>,
    /// `mcp_tasks.task.status`: tasks entering each status.
    pub(crate) status: Counter<u64>,
    /// `mcp_tasks.tasks.running`: runs going on in this process.
    pub(crate) running: UpDownCounter<i64>,
    /// `mcp_tasks.queue.depth`: tasks created here that wait in the store for a slot.
    pub(crate) queued: Gauge<u64>,
    /// `mcp_tasks.lease.takeovers`: tasks whose runner's lease lapsed, taken over here.
    pub(crate) takeovers: Counter<u64>,
}

/// The instruments, made on first use from the global meter provider.
fn get() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("mcp-tasks");
        Instruments {
            operation: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description(
                    "MCP request duration as observed on the receiver from the time it was received until the result is sent",
                )
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            run: meter
                .f64_histogram("mcp_tasks.task.run.duration")
                .with_unit("s")
                .with_description("How long one run of a task's tool took, until it settled or stopped")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            status: meter
                .u64_counter("mcp_tasks.task.status")
                .with_unit("{task}")
                .with_description("Tasks entering each status")
                .build(),
            running: meter
                .i64_up_down_counter("mcp_tasks.tasks.running")
                .with_unit("{task}")
                .with_description("Task runs going on in this process")
                .build(),
            queued: meter
                .u64_gauge("mcp_tasks.queue.depth")
                .with_unit("{task}")
                .with_description("Tasks created by this process that wait in the store for a free slot")
                .build(),
            takeovers: meter
                .u64_counter("mcp_tasks.lease.takeovers")
                .with_unit("{task}")
                .with_description("Tasks whose runner's lease lapsed, taken over by this process")
                .build(),
        }
    })
}

/// Records one request's duration.
pub(crate) fn operation(elapsed: Duration, attributes: &[KeyValue]) {
    if let Some(instruments) = enabled() {
        instruments
            .operation
            .record(elapsed.as_secs_f64(), attributes);
    }
}
