//! OpenTelemetry: traces that follow a task across processes, and metrics, exported over
//! OTLP.
//!
//! With the `otel` feature every request gets a span after the OpenTelemetry semantic
//! conventions for MCP (`{mcp.method.name} {target}`, kind server, with `mcp.method.name`,
//! `jsonrpc.request.id`, `gen_ai.tool.name`, `mcp.session.id`, `mcp.protocol.version`,
//! `network.transport`, `error.type`, and `mcp.task.id` for the task it creates or names),
//! whose parent is the W3C trace context the request carries: `traceparent`, `tracestate`
//! and `baggage` in its `_meta` (both protocol eras), or as HTTP headers. A task keeps the
//! trace context of the request span that created it, so its run (`execute_tool {tool}`)
//! is a child of that span on whichever process claims it: the server, a worker, or the
//! process that took it over after its runner died. Questions, answers, cancellations,
//! reruns and takeovers are events of the run, or spans of their own, in the same trace.
//! Requests the server sends (elicitation, sampling) carry the current trace context in
//! their `_meta`.
//!
//! The spans are `tracing` spans: [`OtelGuard::layer`] (or [`init_from_env`], which installs
//! a subscriber) hands them to OpenTelemetry. A request's span is at `debug` level under the
//! target [`REQUEST_TARGET`] (so that logging at `info` costs nothing per request); a
//! subscriber that filters the layer must let that target through at `debug`, as
//! [`export_filter`] does.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Exports when OTEL_EXPORTER_OTLP_ENDPOINT is set; logs to stderr either way.
//! let _otel = mcp_tasks_runtime::otel::init_from_env()?;
//! // ... serve; dropping the guard flushes what is still queued.
//! # Ok(()) }
//! ```
//!
//! The standard environment applies: `OTEL_EXPORTER_OTLP_ENDPOINT` (and the per-signal
//! `..._TRACES_ENDPOINT`, `..._METRICS_ENDPOINT`), `OTEL_EXPORTER_OTLP_PROTOCOL`
//! (`http/protobuf`, or `grpc` with the `otel-grpc` feature), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, `OTEL_BSP_MAX_QUEUE_SIZE`,
//! `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, `OTEL_BSP_EXPORT_TIMEOUT`,
//! `OTEL_METRIC_EXPORT_INTERVAL`, and `OTEL_SDK_DISABLED`.
//!
//! Finished spans wait in a bounded queue for a thread of their own that exports them in
//! batches: a collector that is down or slow never blocks a request. When the queue is
//! full a span is dropped and counted ([`dropped_spans`], and the metric
//! `mcp_tasks.otel.spans.dropped`).

mod instruments;
mod propagate;
mod queue;

pub(crate) use instruments::{enabled as instruments, operation as record_operation};
pub(crate) use propagate::{adopt, inject, set_parent, trace_of};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::time::Duration;

pub use crate::trace_context::REQUEST_TARGET;

/// The OTLP transport of the exporter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// Protobuf over HTTP (`http/protobuf`), to `{endpoint}/v1/traces` and `/v1/metrics`.
    HttpProtobuf,
    /// gRPC (`grpc`); needs the `otel-grpc` feature.
    Grpc,
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The OTLP exporter could not be built (a malformed endpoint or header, say).
    #[error("cannot build the otlp exporter: {0}")]
    Exporter(String),
    /// `grpc` was asked for, but this build has no `otel-grpc` feature.
    #[error("otlp over grpc needs the otel-grpc feature")]
    GrpcNotBuilt,
    /// An environment variable holds something unusable.
    #[error("{name}: {reason}")]
    Env {
        /// The variable.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A global `tracing` subscriber is installed already.
    #[error("a tracing subscriber is installed already: {0}")]
    Subscriber(String),
    /// The export thread could not start.
    #[error("cannot start the export thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// What [`OtelConfig::start`] sets up: where telemetry goes and how much may wait for it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OtelConfig {
    /// The collector's base URL (like `OTEL_EXPORTER_OTLP_ENDPOINT`); `None` leaves it to
    /// the exporter, which reads the environment or uses the protocol's default.
    pub endpoint: Option<String>,
    /// The OTLP transport.
    pub protocol: Protocol,
    /// `service.name` of the resource; `None` keeps `OTEL_SERVICE_NAME` (or the default).
    pub service_name: Option<String>,
    /// How many finished spans may wait for export; more are dropped and counted.
    pub max_queue_size: usize,
    /// The most spans sent in one export.
    pub max_export_batch_size: usize,
    /// How long spans wait to be sent with others.
    pub scheduled_delay: Duration,
    /// How long one export may take before it is given up (its spans count as dropped).
    pub export_timeout: Duration,
    /// Whether metrics are exported too, over the same protocol as the spans
    /// (`OTEL_METRICS_EXPORTER=none` turns them off).
    pub metrics: bool,
    /// How often metrics are exported.
    pub metric_interval: Duration,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: Protocol::HttpProtobuf,
            service_name: None,
            max_queue_size: 2048,
            max_export_batch_size: 512,
            scheduled_delay: Duration::from_secs(5),
            export_timeout: Duration::from_secs(30),
            metrics: true,
            metric_interval: Duration::from_secs(60),
        }
    }
}

fn env(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn env_number(name: &'static str) -> Result<Option<u64>, OtelError> {
    env(name)
        .map(|v| {
            v.trim().parse::<u64>().map_err(|e| OtelError::Env {
                name,
                reason: e.to_string(),
            })
        })
        .transpose()
}

impl OtelConfig {
    /// A configuration that exports to `endpoint` (a base URL such as
    /// `http://127.0.0.1:4318`) over `protocol`.
    pub fn new(endpoint: impl Into<String>, protocol: Protocol) -> Self {
        Self {
            endpoint: Some(endpoint.into()),
            protocol,
            ..Self::default()
        }
    }

    /// The configuration the standard `OTEL_*` environment describes, or `None` when it asks
    /// for no export: neither `OTEL_EXPORTER_OTLP_ENDPOINT` nor
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, or `OTEL_SDK_DISABLED` is `true`.
    pub fn from_env() -> Result<Option<Self>, OtelError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if env("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        let mut config = Self::default();
        let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"));
        config.protocol = match protocol.as_deref().map(str::trim) {
            None | Some("http/protobuf") => Protocol::HttpProtobuf,
            Some("grpc") => Protocol::Grpc,
            Some(other) => {
                return Err(OtelError::Env {
                    name: "OTEL_EXPORTER_OTLP_PROTOCOL",
                    reason: format!("{other:?} is not one of http/protobuf, grpc"),
                });
            }
        };
        let ms = |n: u64| Duration::from_millis(n);
        if let Some(n) = env_number("OTEL_BSP_MAX_QUEUE_SIZE")? {
            config.max_queue_size = n.max(1) as usize;
        }
        if let Some(n) = env_number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")? {
            config.max_export_batch_size = n.max(1) as usize;
        }
        if let Some(n) = env_number("OTEL_BSP_SCHEDULE_DELAY")? {
            config.scheduled_delay = ms(n);
        }
        if let Some(n) = env_number("OTEL_BSP_EXPORT_TIMEOUT")? {
            config.export_timeout = ms(n);
        }
        if let Some(n) = env_number("OTEL_METRIC_EXPORT_INTERVAL")? {
            config.metric_interval = ms(n.max(1));
        }
        config.metrics = env("OTEL_METRICS_EXPORTER").is_none_or(|v| v.trim() != "none");
        Ok(Some(config))
    }

    /// Starts exporting: builds the exporters, the export thread and the providers, and
    /// makes them OpenTelemetry's global ones (the propagator too: W3C trace context and
    /// baggage). Spans reach OpenTelemetry through [`OtelGuard::layer`].
    pub fn start(self) -> Result<OtelGuard, OtelError> {
        let mut resource = Resource::builder();
        if let Some(name) = &self.service_name {
            resource = resource.with_service_name(name.clone());
        }
        let resource = resource.build();
        let processor = queue::start(&self, &resource)?;
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.clone())
            .build();
        let meter_provider = if self.metrics {
            queue::meter_provider(&self, resource)?
        } else {
            None
        };
        opentelemetry::global::set_tracer_provider(tracer_provider.clone());
        if let Some(meters) = &meter_provider {
            opentelemetry::global::set_meter_provider(meters.clone());
            queue::observe_drops(meters);
            record_metrics();
        }
        opentelemetry::global::set_text_map_propagator(
            opentelemetry::propagation::TextMapCompositePropagator::new(vec![
                Box::new(opentelemetry_sdk::propagation::TraceContextPropagator::new()),
                Box::new(opentelemetry_sdk::propagation::BaggagePropagator::new()),
            ]),
        );
        Ok(OtelGuard {
            tracer_provider,
            meter_provider,
        })
    }
}

/// Keeps telemetry exporting; dropping it flushes what is queued and stops the export.
#[derive(Debug)]
#[must_use = "dropping the guard stops the export"]
pub struct OtelGuard {
    tracer_provider: SdkTracerProvider,
    meter_provider: Option<SdkMeterProvider>,
}

impl OtelGuard {
    /// The `tracing` layer that turns spans into OpenTelemetry spans exported by this
    /// guard's provider. Add it to a subscriber with no filter of its own, or with
    /// [`export_filter`] (`info`, and the request spans at `debug`).
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer_provider.tracer("mcp-tasks"))
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_threads(false)
            .with_location(false)
    }

    /// Sends every span and metric still waiting, and waits for the sends to end.
    pub fn flush(&self) {
        let _ = self.tracer_provider.force_flush();
        if let Some(meters) = &self.meter_provider {
            let _ = meters.force_flush();
        }
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        self.flush();
        let _ = self.tracer_provider.shutdown();
        if let Some(meters) = &self.meter_provider {
            let _ = meters.shutdown();
        }
    }
}

/// Records this crate's metrics from now on, with OpenTelemetry's global meter provider
/// (install it first). [`OtelConfig::start`] does this when it exports metrics; until then
/// they cost nothing.
pub fn record_metrics() {
    instruments::enable();
}

/// How many finished spans were dropped since the process started: their queue was full
/// (a collector down or slower than the spans come), or their export failed or timed out.
pub fn dropped_spans() -> u64 {
    queue::dropped()
}

/// The filter of an OpenTelemetry layer: spans and events at `info` and above, and the
/// request spans ([`REQUEST_TARGET`], at `debug`).
pub fn export_filter() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new()
        .with_default(tracing_subscriber::filter::LevelFilter::INFO)
        .with_target(
            REQUEST_TARGET,
            tracing_subscriber::filter::LevelFilter::DEBUG,
        )
}

/// Sets up logging and, when the environment asks for it, export: installs a global
/// `tracing` subscriber that logs to stderr (`RUST_LOG` picks the level, `info` by
/// default) and, when [`OtelConfig::from_env`] finds an endpoint, hands `info` spans and
/// events to OpenTelemetry too. Returns the guard that keeps the export going, if any.
pub fn init_from_env() -> Result<Option<OtelGuard>, OtelError> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let guard = OtelConfig::from_env()?.map(OtelConfig::start).transpose()?;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        );
    let spans = guard
        .as_ref()
        .map(|g| g.layer().with_filter(export_filter()));
    tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init()
        .map_err(|e| OtelError::Subscriber(e.to_string()))?;
    Ok(guard)
}

/// Starts export when the environment asks for it ([`OtelConfig::from_env`]) and installs a
/// global `tracing` subscriber that only hands `info` spans and events to OpenTelemetry:
/// no logs (for a command-line program whose output is its own). `None`, and nothing
/// installed, when the environment asks for no export.
pub fn init_export_from_env() -> Result<Option<OtelGuard>, OtelError> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let Some(guard) = OtelConfig::from_env()?.map(OtelConfig::start).transpose()? else {
        return Ok(None);
    };
    tracing_subscriber::registry()
        .with(guard.layer().with_filter(export_filter()))
        .try_init()
        .map_err(|e| OtelError::Subscriber(e.to_string()))?;
    Ok(Some(guard))
}
