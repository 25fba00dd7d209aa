//! The export side: a bounded queue of finished spans drained by a thread of its own, and
//! the periodic metric export.
//!
//! A span is offered to the queue without waiting; when it is full the span is dropped and
//! counted. The thread sends batches of up to `max_export_batch_size` spans once the batch
//! is full or `scheduled_delay` passed, each send bounded by `export_timeout`.

use super::{OtelConfig, OtelError, Protocol};
use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Spans dropped since the process started (queue full, or export failed).
static DROPPED: AtomicU64 = AtomicU64::new(0);

pub(super) fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Reports [`DROPPED`] as the counter `mcp_tasks.otel.spans.dropped`.
pub(super) fn observe_drops(meters: &SdkMeterProvider) {
    use opentelemetry::metrics::MeterProvider as _;
    let _ = meters
        .meter("mcp-tasks")
        .u64_observable_counter("mcp_tasks.otel.spans.dropped")
        .with_unit("{span}")
        .with_description(
            "Finished spans never exported: their queue was full, or their export failed",
        )
        .with_callback(|observer| observer.observe(dropped(), &[]))
        .build();
}

/// What the export thread is told.
enum Item {
    Span(Box<SpanData>),
    /// Export everything queued, then answer.
    Flush(SyncSender<()>),
    /// Export everything queued, shut the exporter down, answer and end.
    Shutdown(SyncSender<()>),
}

/// The span processor: offers each finished span to the queue.
#[derive(Debug)]
pub(super) struct BoundedProcessor {
    spans: SyncSender<Item>,
    /// Flushes and shutdowns, which must not be lost to a full queue.
    control: Mutex<mpsc::Sender<Item>>,
    /// Bounds how long a flush or a shutdown waits for the thread.
    export_timeout: Duration,
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.spans.try_send(Item::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Item::Flush)
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.ask(Item::Shutdown)
    }
}

impl BoundedProcessor {
    /// Sends a control message and waits (boundedly) for its answer.
    fn ask(&self, make: fn(SyncSender<()>) -> Item) -> OTelSdkResult {
        let (tx, rx) = mpsc::sync_channel(1);
        let sent = self
            .control
            .lock()
            .map_err(|_| OTelSdkError::InternalFailure("the control channel is poisoned".into()))?
            .send(make(tx));
        if sent.is_err() {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        // Wakes the thread if it waits for spans; a full queue wakes it anyway.
        let _ = self.spans.try_send(Item::Flush(mpsc::sync_channel(1).0));
        rx.recv_timeout(self.export_timeout * 2 + Duration::from_secs(1))
            .map_err(|_| OTelSdkError::Timeout(self.export_timeout))
    }
}

/// Runs a future to its end on this thread (an export over HTTP, whose client blocks).
fn park_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// How the export thread runs an export: parked on the thread (HTTP), or on a runtime of its
/// own (gRPC, whose client needs one).
enum Driver {
    Park,
    #[cfg(feature = "otel-grpc")]
    Tokio(tokio::runtime::Runtime),
}

impl Driver {
    /// Runs one export; `false` when it failed or took longer than `timeout` (over HTTP
    /// the client's own timeout, which is `timeout` too, bounds it).
    fn run<F: Future<Output = OTelSdkResult>>(&self, future: F, timeout: Duration) -> bool {
        match self {
            Driver::Park => {
                let _ = timeout;
                park_on(future).is_ok()
            }
            #[cfg(feature = "otel-grpc")]
            // The timer is made inside the runtime, which it needs.
            Driver::Tokio(rt) => matches!(
                rt.block_on(async { tokio::time::timeout(timeout, future).await }),
                Ok(Ok(()))
            ),
        }
    }
}

/// An exporter's builder with the configured timeout and endpoint: over HTTP the signal's
/// `path` (`v1/traces`, `v1/metrics`) goes after the base endpoint; over gRPC (`None`) the
/// endpoint is used as it is.
fn configured<B: WithExportConfig>(builder: B, config: &OtelConfig, path: Option<&str>) -> B {
    let builder = builder.with_timeout(config.export_timeout);
    match (&config.endpoint, path) {
        (Some(base), Some(path)) => {
            builder.with_endpoint(format!("{}/{path}", base.trim_end_matches('/')))
        }
        (Some(base), None) => builder.with_endpoint(base.clone()),
        (None, _) => builder,
    }
}

/// Builds the span exporter and starts the export thread.
pub(super) fn start(
    config: &OtelConfig,
    resource: &Resource,
) -> Result<BoundedProcessor, OtelError> {
    let build = |e: opentelemetry_otlp::ExporterBuildError| OtelError::Exporter(e.to_string());
    let (driver, mut exporter) = match config.protocol {
        Protocol::HttpProtobuf => {
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            let exporter = configured(builder, config, Some("v1/traces"))
                .build()
                .map_err(build)?;
            (Driver::Park, exporter)
        }
        #[cfg(feature = "otel-grpc")]
        Protocol::Grpc => {
            let (rt, exporter) = grpc::on_own_runtime(|| {
                let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                configured(builder, config, None).build().map_err(build)
            })?;
            (Driver::Tokio(rt), exporter)
        }
        #[cfg(not(feature = "otel-grpc"))]
        Protocol::Grpc => return Err(OtelError::GrpcNotBuilt),
    };
    exporter.set_resource(resource);
    let (spans, queue) = mpsc::sync_channel(config.max_queue_size);
    let (control, orders) = mpsc::channel();
    let batch_size = config.max_export_batch_size;
    let delay = config.scheduled_delay;
    let timeout = config.export_timeout;
    std::thread::Builder::new()
        .name("mcp-tasks-otel".into())
        .spawn(move || {
            let export = |batch: &mut Vec<SpanData>| {
                while !batch.is_empty() {
                    let chunk: Vec<SpanData> = batch.drain(..batch.len().min(batch_size)).collect();
                    let n = chunk.len() as u64;
                    if !driver.run(exporter.export(chunk), timeout) {
                        DROPPED.fetch_add(n, Ordering::Relaxed);
                    }
                }
            };
            let mut batch = Vec::new();
            let mut due = Instant::now() + delay;
            loop {
                let wait = due.saturating_duration_since(Instant::now());
                match queue.recv_timeout(wait) {
                    Ok(Item::Span(span)) => {
                        batch.push(*span);
                        if batch.len() >= batch_size {
                            export(&mut batch);
                            due = Instant::now() + delay;
                        }
                    }
                    Ok(Item::Flush(_) | Item::Shutdown(_)) => {}
                    Err(RecvTimeoutError::Timeout) => {
                        export(&mut batch);
                        due = Instant::now() + delay;
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        export(&mut batch);
                        let _ = exporter.shutdown();
                        return;
                    }
                }
                while let Ok(order) = orders.try_recv() {
                    while let Ok(item) = queue.try_recv() {
                        if let Item::Span(span) = item {
                            batch.push(*span);
                        }
                    }
                    export(&mut batch);
                    match order {
                        Item::Flush(done) => {
                            let _ = exporter.force_flush();
                            let _ = done.send(());
                        }
                        Item::Shutdown(done) => {
                            let _ = exporter.shutdown();
                            let _ = done.send(());
                            return;
                        }
                        Item::Span(_) => {}
                    }
                }
            }
        })?;
    Ok(BoundedProcessor {
        spans,
        control: Mutex::new(control),
        export_timeout: config.export_timeout,
    })
}

/// The meter provider: a periodic export of every metric over OTLP, HTTP/protobuf or gRPC.
pub(super) fn meter_provider(
    config: &OtelConfig,
    resource: Resource,
) -> Result<Option<SdkMeterProvider>, OtelError> {
    let build = |e: opentelemetry_otlp::ExporterBuildError| OtelError::Exporter(e.to_string());
    fn provider<E>(reader: PeriodicReader<E>, resource: Resource) -> SdkMeterProvider
    where
        E: opentelemetry_sdk::metrics::exporter::PushMetricExporter,
    {
        SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build()
    }
    match config.protocol {
        Protocol::HttpProtobuf => {
            let builder = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            let exporter = configured(builder, config, Some("v1/metrics"))
                .build()
                .map_err(build)?;
            let reader = PeriodicReader::builder(exporter)
                .with_interval(config.metric_interval)
                .build();
            Ok(Some(provider(reader, resource)))
        }
        #[cfg(feature = "otel-grpc")]
        Protocol::Grpc => {
            let exporter = grpc::MetricsOnRuntime::new(config)?;
            let reader = PeriodicReader::builder(exporter)
                .with_interval(config.metric_interval)
                .build();
            Ok(Some(provider(reader, resource)))
        }
        #[cfg(not(feature = "otel-grpc"))]
        Protocol::Grpc => Err(OtelError::GrpcNotBuilt),
    }
}

#[cfg(feature = "otel-grpc")]
mod grpc {
    //! Metrics over gRPC: the periodic reader exports from a thread of its own, which has no
    //! runtime, and the gRPC client needs one; so each export runs on a small runtime that
    //! the exporter owns, and is bounded by the export timeout.

    use super::{OtelConfig, OtelError, configured};
    use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
    use opentelemetry_sdk::metrics::Temporality;
    use opentelemetry_sdk::metrics::data::ResourceMetrics;
    use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
    use std::time::Duration;

    /// A small runtime of its own, and what `make` builds inside it: a gRPC client makes its
    /// channel in the runtime that drives it.
    pub(super) fn on_own_runtime<T>(
        make: impl FnOnce() -> Result<T, OtelError>,
    ) -> Result<(tokio::runtime::Runtime, T), OtelError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let made = {
            let _inside = rt.enter();
            make()?
        };
        Ok((rt, made))
    }

    /// An OTLP/gRPC metric exporter driven on a runtime of its own.
    #[derive(Debug)]
    pub(super) struct MetricsOnRuntime {
        rt: tokio::runtime::Runtime,
        inner: opentelemetry_otlp::MetricExporter,
        timeout: Duration,
    }

    impl MetricsOnRuntime {
        pub(super) fn new(config: &OtelConfig) -> Result<Self, OtelError> {
            let (rt, inner) = on_own_runtime(|| {
                let builder = opentelemetry_otlp::MetricExporter::builder().with_tonic();
                configured(builder, config, None)
                    .build()
                    .map_err(|e| OtelError::Exporter(e.to_string()))
            })?;
            Ok(Self {
                rt,
                inner,
                timeout: config.export_timeout,
            })
        }
    }

    impl PushMetricExporter for MetricsOnRuntime {
        async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
            let timeout = self.timeout;
            // The timer is made inside the runtime, which it needs.
            match self
                .rt
                .block_on(async { tokio::time::timeout(timeout, self.inner.export(metrics)).await })
            {
                Ok(result) => result,
                Err(_) => Err(OTelSdkError::Timeout(timeout)),
            }
        }

        fn force_flush(&self) -> OTelSdkResult {
            self.inner.force_flush()
        }

        fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
            self.inner.shutdown_with_timeout(timeout)
        }

        fn temporality(&self) -> Temporality {
            self.inner.temporality()
        }
    }
}
