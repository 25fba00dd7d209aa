//! OpenTelemetry across processes, checked with a real OTLP/HTTP receiver in the test that
//! decodes the protobuf the processes send (`opentelemetry-proto`).
//!
//! One trace runs from the command line's client span, through the serving process's
//! request span, to the run span of the worker that ran the task, with the right parents;
//! after a worker is killed with `kill -9`, the takeover and the rerun on another worker
//! stay in the trace of the call that created the task. Each scenario runs on every
//! shared store. Every wait is bounded.

#[macro_use]
mod support;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{LEASE_MS, Log, Server, Store, TERMINAL, example, task_id};
use tokio::process::{Child, Command};

on_every_store!(
    a_call_s_trace_runs_from_the_client_through_the_server_to_the_worker,
    a_task_taken_over_after_kill_9_stays_in_the_trace_that_created_it,
);

/// Any service, for [`Received::span`].
const ANY: &str = "*";

/// A bound on any wait for spans or a task.
const WITHIN: Duration = Duration::from_secs(40);

/// One span as the receiver decoded it.
#[derive(Clone, Debug, serde::Serialize)]
struct Got {
    service: String,
    name: String,
    kind: i32,
    trace: String,
    id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
    events: Vec<String>,
    /// When it started and ended, and when its events happened (Unix nanoseconds).
    start: u64,
    end: u64,
    event_times: Vec<u64>,
}

/// What the receiver was sent.
#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Got>>>,
    /// `(service, metric name)` of every metric sent.
    metrics: Arc<Mutex<BTreeSet<(String, String)>>>,
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `service.name` of an export's resource ("" without one).
fn service_name(resource: Option<&Resource>) -> String {
    resource
        .map(|r| attributes(&r.attributes))
        .and_then(|a| a.get("service.name").cloned())
        .unwrap_or_default()
}

/// Keeps the spans of one export.
fn keep(spans: &Mutex<Vec<Got>>, request: ExportTraceServiceRequest) {
    let mut spans = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = service_name(resource.resource.as_ref());
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Got {
                    service: service.clone(),
                    name: span.name.clone(),
                    kind: span.kind,
                    trace: hex(&span.trace_id),
                    id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    events: span.events.iter().map(|e| e.name.clone()).collect(),
                    start: span.start_time_unix_nano,
                    end: span.end_time_unix_nano,
                    event_times: span.events.iter().map(|e| e.time_unix_nano).collect(),
                });
            }
        }
    }
}

/// Keeps the `(service, metric name)` of every metric in `request`.
fn keep_metrics(metrics: &Mutex<BTreeSet<(String, String)>>, request: ExportMetricsServiceRequest) {
    let mut metrics = metrics.lock().unwrap();
    for resource in request.resource_metrics {
        let service = service_name(resource.resource.as_ref());
        for scope in resource.scope_metrics {
            for metric in scope.metrics {
                metrics.insert((service.clone(), metric.name));
            }
        }
    }
}

/// The OTLP/gRPC metrics service, keeping what it is sent.
struct GrpcMetrics(Arc<Mutex<BTreeSet<(String, String)>>>);

#[tonic::async_trait]
impl MetricsService for GrpcMetrics {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        keep_metrics(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// The OTLP/gRPC trace service, keeping what it is sent.
struct GrpcTraces(Arc<Mutex<Vec<Got>>>);

#[tonic::async_trait]
impl TraceService for GrpcTraces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Received {
    /// Serves OTLP/gRPC traces and metrics on a free loopback port; returns its URL.
    async fn serve_grpc(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let traces = TraceServiceServer::new(GrpcTraces(Arc::clone(&self.spans)));
        let metrics = MetricsServiceServer::new(GrpcMetrics(Arc::clone(&self.metrics)));
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(traces)
                .add_service(metrics)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap()
        });
        format!("http://{addr}")
    }

    /// Serves OTLP/HTTP (`/v1/traces`, `/v1/metrics`) on a free loopback port; returns its
    /// base URL.
    async fn serve(&self) -> String {
        let traces = {
            let spans = Arc::clone(&self.spans);
            move |body: Bytes| async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP trace protobuf");
                keep(&spans, request);
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        };
        let metrics = {
            let metrics = Arc::clone(&self.metrics);
            move |body: Bytes| async move {
                let request =
                    ExportMetricsServiceRequest::decode(body).expect("OTLP metrics protobuf");
                keep_metrics(&metrics, request);
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        };
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(traces))
            .route("/v1/metrics", axum::routing::post(metrics));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    /// Waits (boundedly) for a span of `service` (or of any, [`ANY`]) named `name` that
    /// `also` accepts.
    async fn span(&self, service: &str, name: &str, also: impl Fn(&Got) -> bool) -> Got {
        let found = tokio::time::timeout(WITHIN, async {
            loop {
                let hit = self
                    .spans
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|s| (service == ANY || s.service == service) && s.name == name && also(s))
                    .cloned();
                if let Some(hit) = hit {
                    return hit;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            let seen: Vec<String> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .map(|s| format!("{}: {} {} <- {}", s.service, s.name, s.id, s.parent))
                .collect();
            panic!("no span {name:?} of {service:?} within {WITHIN:?}; seen: {seen:#?}")
        })
    }

    /// Waits (boundedly) for the metric `name` from `service`.
    async fn metric(&self, service: &str, name: &str) {
        let want = (service.to_owned(), name.to_owned());
        let found = tokio::time::timeout(WITHIN, async {
            while !self.metrics.lock().unwrap().contains(&want) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "no metric {name:?} from {service:?}; seen: {:?}",
            self.metrics.lock().unwrap()
        );
    }
}

/// The environment that makes a process export to `endpoint` as `service`, quickly.
fn otel_env(endpoint: &str, service: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
        ("OTEL_SERVICE_NAME", service.to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300".to_owned()),
    ]
}

/// A fixture process that runs tasks and serves nobody, exporting as `service`.
fn worker(store: &Store, endpoint: &str, service: &str) -> (Child, Log) {
    let mut child = Command::new(example("conformance-server"))
        .args(["--worker", "--store", &store.arg()])
        .args(["--lease-ms", &LEASE_MS.to_string()])
        .envs(otel_env(endpoint, service))
        .env("RUST_LOG", "mcp_tasks_runtime=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a worker");
    let log = Log::default();
    log.gather(child.stderr.take().unwrap());
    (child, log)
}

/// SPAN_KIND_SERVER, SPAN_KIND_CLIENT of OTLP.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

async fn a_call_s_trace_runs_from_the_client_through_the_server_to_the_worker(store: &Store) {
    let received = Received::default();
    let endpoint = received.serve().await;
    let mut command = Command::new(example("conformance-server"));
    command
        .args([
            "--http",
            "127.0.0.1:0",
            "--store",
            &store.arg(),
            "--no-execute",
        ])
        .args(["--lease-ms", &LEASE_MS.to_string()])
        .envs(otel_env(&endpoint, "server"));
    let server = support::http::HttpFixture::spawn(command).await;
    let (_worker, _log) = worker(store, &endpoint, "worker");

    let home = std::env::temp_dir().join(format!("mcp-tasks-otel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let key = format!("otel-{}", store.arg().len());
    let out = tokio::time::timeout(
        WITHIN,
        Command::new(env!("CARGO_BIN_EXE_mcp-tasks-cli"))
            .args([
                "--url",
                &server.url,
                "call",
                "mark",
                &format!("key={key}"),
                "ms=200",
            ])
            .arg("--json")
            .env("MCP_TASKS_HOME", &home)
            .envs(otel_env(&endpoint, "cli"))
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the call ends in time")
    .expect("run the command line");
    let _ = std::fs::remove_dir_all(&home);
    assert!(
        out.status.success(),
        "mcp-tasks call: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let client = received
        .span("cli", "tools/call mark", |s| s.kind == CLIENT)
        .await;
    let request = received
        .span("server", "tools/call mark", |s| s.trace == client.trace)
        .await;
    let run = received
        .span("worker", "execute_tool mark", |s| s.trace == client.trace)
        .await;
    // The server's request span is the client span's child, the worker's run the request's.
    assert_eq!(request.parent, client.id, "{request:#?}\n{client:#?}");
    assert_eq!(request.kind, SERVER);
    assert_eq!(run.parent, request.id, "{run:#?}\n{request:#?}");
    // The conventions' attributes.
    let a = &request.attributes;
    assert_eq!(a["mcp.method.name"], "tools/call", "{a:?}");
    assert_eq!(a["gen_ai.tool.name"], "mark", "{a:?}");
    assert_eq!(a["network.transport"], "tcp", "{a:?}");
    assert_eq!(a["network.protocol.name"], "http", "{a:?}");
    assert_eq!(a["mcp.protocol.version"], "2026-07-28", "{a:?}");
    assert!(a.contains_key("jsonrpc.request.id"), "{a:?}");
    assert!(!a.contains_key("error.type"), "{a:?}");
    let task = &a["mcp.task.id"];
    assert_eq!(&run.attributes["mcp.task.id"], task, "{run:#?}");
    assert_eq!(run.attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(run.attributes["mcp_tasks.task.status"], "completed");
    assert_eq!(client.attributes["mcp.method.name"], "tools/call");
    // Metrics after the same conventions, from each process.
    received
        .metric("server", "mcp.server.operation.duration")
        .await;
    received
        .metric("worker", "mcp_tasks.task.run.duration")
        .await;
    received.metric("worker", "mcp_tasks.task.status").await;
    server.kill().await;
    // `MCP_TASKS_TRACE_OUT=docs` keeps this trace: its spans as JSON, and a waterfall.
    if let (Ok(dir), Store::Sqlite(_)) = (std::env::var("MCP_TASKS_TRACE_OUT"), store) {
        let spans: Vec<Got> = received
            .spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.trace == client.trace)
            .cloned()
            .collect();
        let dir = Path::new(&dir);
        let json = serde_json::to_string_pretty(&spans).unwrap();
        std::fs::write(dir.join("trace.json"), json + "\n").unwrap();
        std::fs::write(dir.join("trace.svg"), waterfall(&spans)).unwrap();
    }
}

/// Escapes text for SVG.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A waterfall of one trace's spans: each span a bar under its parent, coloured by the
/// process that sent it, its events as ticks.
fn waterfall(spans: &[Got]) -> String {
    // Parents first, children in start order under them.
    fn visit<'a>(spans: &'a [Got], parent: &str, depth: usize, out: &mut Vec<(usize, &'a Got)>) {
        let mut children: Vec<&Got> = spans.iter().filter(|s| s.parent == parent).collect();
        children.sort_by_key(|s| s.start);
        for child in children {
            out.push((depth, child));
            visit(spans, &child.id, depth + 1, out);
        }
    }
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.id.as_str()).collect();
    let mut rows = Vec::new();
    let mut roots: Vec<&Got> = spans
        .iter()
        .filter(|s| !ids.contains(s.parent.as_str()))
        .collect();
    roots.sort_by_key(|s| s.start);
    for root in roots {
        rows.push((0, root));
        visit(spans, &root.id, 1, &mut rows);
    }
    let t0 = spans.iter().map(|s| s.start).min().unwrap_or(0);
    let t1 = spans.iter().map(|s| s.end).max().unwrap_or(1).max(t0 + 1);
    let (label_w, bar_w, row_h, top) = (430.0, 520.0, 30.0, 58.0);
    let x = |t: u64| label_w + (t.saturating_sub(t0)) as f64 / (t1 - t0) as f64 * bar_w;
    let colour = |service: &str| match service {
        "cli" => "#6b7fd7",
        "server" => "#2a9d8f",
        "worker" => "#e76f51",
        _ => "#8d99ae",
    };
    let height = top + rows.len() as f64 * row_h + 64.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"980\" height=\"{height}\" \
         font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n\
         <rect width=\"980\" height=\"{height}\" fill=\"#ffffff\"/>\n\
         <text x=\"16\" y=\"24\" font-size=\"15\" font-weight=\"bold\">One trace, three processes: \
         mcp-tasks call \u{2192} server \u{2192} worker</text>\n\
         <text x=\"16\" y=\"44\" fill=\"#555\">trace {} \u{00b7} {:.0} ms \u{00b7} \
         recorded by an OTLP receiver from a real run (tests/e2e/tests/otel.rs)</text>\n",
        spans.first().map(|s| s.trace.as_str()).unwrap_or_default(),
        (t1 - t0) as f64 / 1e6
    );
    for (i, (depth, span)) in rows.iter().enumerate() {
        let y = top + i as f64 * row_h;
        if i % 2 == 0 {
            svg += &format!(
                "<rect x=\"0\" y=\"{y}\" width=\"980\" height=\"{row_h}\" fill=\"#f5f6f8\"/>\n"
            );
        }
        let kind = match span.kind {
            SERVER => "server",
            CLIENT => "client",
            _ => "internal",
        };
        svg += &format!(
            "<text x=\"{}\" y=\"{}\"><tspan font-weight=\"bold\" fill=\"{}\">{}</tspan> {} \
             <tspan fill=\"#777\">({kind})</tspan></text>\n",
            16.0 + *depth as f64 * 16.0,
            y + 19.0,
            colour(&span.service),
            escape(&span.service),
            escape(&span.name)
        );
        let (a, b) = (x(span.start), x(span.end).max(x(span.start) + 2.0));
        svg += &format!(
            "<rect x=\"{a:.1}\" y=\"{}\" width=\"{:.1}\" height=\"14\" rx=\"3\" fill=\"{}\"/>\n",
            y + 8.0,
            b - a,
            colour(&span.service)
        );
        let ms = span.end.saturating_sub(span.start) as f64 / 1e6;
        let (tx, anchor) = if b + 70.0 < label_w + bar_w + 40.0 {
            (b + 4.0, "start")
        } else {
            (a - 4.0, "end")
        };
        svg += &format!(
            "<text x=\"{tx:.1}\" y=\"{}\" text-anchor=\"{anchor}\" fill=\"#333\">{ms:.1} ms</text>\n",
            y + 19.0
        );
        for (name, at) in span.events.iter().zip(&span.event_times) {
            svg += &format!(
                "<rect x=\"{:.1}\" y=\"{}\" width=\"2\" height=\"20\" fill=\"#222\"><title>{}</title></rect>\n",
                x(*at),
                y + 5.0,
                escape(name)
            );
        }
    }
    // A time axis: five marks across the trace.
    let bottom = top + rows.len() as f64 * row_h;
    for i in 0..=4 {
        let t = t0 + (t1 - t0) / 4 * i;
        let at = x(t);
        svg += &format!(
            "<line x1=\"{at:.1}\" y1=\"{top}\" x2=\"{at:.1}\" y2=\"{bottom}\" stroke=\"#ccc\" stroke-dasharray=\"3,3\"/>\n\
             <text x=\"{at:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#777\">{:.0} ms</text>\n",
            bottom + 14.0,
            (t - t0) as f64 / 1e6
        );
    }
    svg += &format!(
        "<text x=\"16\" y=\"{}\" fill=\"#555\">Each bar is a span placed in time, indented under its parent; ticks are its events.</text>\n\
         <text x=\"16\" y=\"{}\" fill=\"#555\">The worker's run is a child of the server's request span, itself a child of the command line's call.</text>\n</svg>\n",
        bottom + 34.0,
        bottom + 52.0
    );
    svg
}

/// Over OTLP/gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`) a server's request span and its
/// task's run reach the collector with the same parents, and its metrics arrive too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_out_over_grpc_too() {
    let received = Received::default();
    let endpoint = received.serve_grpc().await;
    let store = Store::sqlite("otel_grpc");
    let mut env = otel_env(&endpoint, "grpc-server");
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()));
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, Path::new(v))).collect();
    let mut server = Server::spawn_env(&store.arg(), &[], &env);
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let r = server
        .request(
            "tools/call",
            json!({"name": "mark", "arguments": {"key": "grpc", "ms": 10},
                   "_meta": {"traceparent": traceparent}}),
        )
        .await;
    let id = task_id(&r);
    let r = server.wait_for(&id, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let request = received
        .span("grpc-server", "tools/call mark", |s| {
            s.trace == CALLER_TRACE
        })
        .await;
    assert_eq!(request.parent, CALLER_SPAN, "{request:#?}");
    let run = received
        .span("grpc-server", "execute_tool mark", |s| {
            s.trace == CALLER_TRACE
        })
        .await;
    assert_eq!(run.parent, request.id, "{run:#?}");
    assert!(
        !request.attributes.contains_key("error.type"),
        "{request:#?}"
    );
    // A tool's error result (`isError: true`) is the request's `tool_error`.
    let r = server
        .request(
            "tools/call",
            json!({"name": "test_error_handling", "arguments": {},
                   "_meta": {"traceparent": traceparent}}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let failed = received
        .span("grpc-server", "tools/call test_error_handling", |s| {
            s.trace == CALLER_TRACE
        })
        .await;
    assert_eq!(failed.attributes["error.type"], "tool_error", "{failed:#?}");
    received
        .metric("grpc-server", "mcp.server.operation.duration")
        .await;
    received
        .metric("grpc-server", "mcp_tasks.task.run.duration")
        .await;
    server.kill().await;
}

/// A task's question carries the trace context of the run that asks it in its `_meta`, and
/// the question and its answer are events of the run; a cancel is one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_question_carries_the_trace_context_of_its_run() {
    let received = Received::default();
    let endpoint = received.serve().await;
    let store = Store::sqlite("otel_question");
    let env = otel_env(&endpoint, "server");
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, Path::new(v))).collect();
    let mut server = Server::spawn_env(&store.arg(), &[], &env);
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let r = server
        .request(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"},
                   "_meta": {"traceparent": traceparent}}),
        )
        .await;
    let id = task_id(&r);
    let r = server.wait_for(&id, &["input_required"], WITHIN).await;
    let (key, question) = r["result"]["inputRequests"]
        .as_object()
        .and_then(|q| q.iter().next())
        .unwrap_or_else(|| panic!("no question: {r}"));
    let sent = question["params"]["_meta"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no trace context in the question: {question}"))
        .to_owned();
    let r = server
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {
                key.clone(): {"action": "accept", "content": {"confirm": true}}
            }}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let r = server.wait_for(&id, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let run = received
        .span("server", "execute_tool confirm_delete", |s| {
            s.trace == CALLER_TRACE
        })
        .await;
    // The question names the run as its parent span.
    assert_eq!(sent, format!("00-{CALLER_TRACE}-{}-01", run.id), "{run:#?}");
    for event in ["input requested", "input received"] {
        assert!(run.events.iter().any(|e| e == event), "{event}: {run:#?}");
    }

    // A cancelled run says so.
    let r = server
        .request(
            "tools/call",
            json!({"name": "mark", "arguments": {"key": "cancel-me", "ms": 60000},
                   "_meta": {"traceparent": format!("00-{CALLER_TRACE}-{CANCEL_SPAN}-01")}}),
        )
        .await;
    let id = task_id(&r);
    // Its tool runs (the sleep a run has started in), then the cancel comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = server.request("tasks/cancel", json!({"taskId": id})).await;
    assert!(r.get("error").is_none(), "{r}");
    let cancelled = received
        .span("server", "execute_tool mark", |s| s.trace == CALLER_TRACE)
        .await;
    assert!(
        cancelled.events.iter().any(|e| e == "cancel requested"),
        "{cancelled:#?}"
    );
    server.kill().await;
}

/// Sampling follows the environment: with `OTEL_TRACES_SAMPLER=parentbased_always_on`, a
/// call whose caller did not sample its trace (flags `00`) sends no span, nor does its
/// task's run; a sampled one sends both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_environment_and_the_caller() {
    let received = Received::default();
    let endpoint = received.serve().await;
    let store = Store::sqlite("otel_sampling");
    let mut env = otel_env(&endpoint, "server");
    env.push(("OTEL_TRACES_SAMPLER", "parentbased_always_on".to_owned()));
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, Path::new(v))).collect();
    let mut server = Server::spawn_env(&store.arg(), &[], &env);
    let unsampled = "0af7651916cd43dd8448eb211c80319c";
    for (trace, flags) in [(unsampled, "00"), (CALLER_TRACE, "01")] {
        let r = server
            .request(
                "tools/call",
                json!({"name": "mark", "arguments": {"key": format!("s{flags}"), "ms": 10},
                       "_meta": {"traceparent": format!("00-{trace}-{CALLER_SPAN}-{flags}")}}),
            )
            .await;
        let id = task_id(&r);
        let r = server.wait_for(&id, TERMINAL, WITHIN).await;
        assert_eq!(r["result"]["status"], "completed", "{r}");
    }
    // The sampled call's spans come (after the other's would have: one queue, in order).
    received
        .span("server", "execute_tool mark", |s| s.trace == CALLER_TRACE)
        .await;
    received
        .span("server", "tools/call mark", |s| s.trace == CALLER_TRACE)
        .await;
    let leaked: Vec<Got> = received
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.trace == unsampled)
        .cloned()
        .collect();
    assert!(
        leaked.is_empty(),
        "spans of an unsampled trace: {leaked:#?}"
    );
    server.kill().await;
}

/// The span of the second call of [`a_task_s_question_carries_the_trace_context_of_its_run`].
const CANCEL_SPAN: &str = "00f067aa0ba902b8";

/// A trace context the test makes up, as a caller's span would send it.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

async fn a_task_taken_over_after_kill_9_stays_in_the_trace_that_created_it(store: &Store) {
    let received = Received::default();
    let endpoint = received.serve().await;
    let env = otel_env(&endpoint, "server");
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, Path::new(v))).collect();
    let mut server = Server::spawn_env(&store.arg(), &["--no-execute"], &env);
    let (mut first, first_log) = worker(store, &endpoint, "first");

    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let r = server
        .request(
            "tools/call",
            json!({"name": "mark", "arguments": {"key": "taken-over", "ms": 3000},
                   "_meta": {"traceparent": traceparent, "tracestate": "caller=1"}}),
        )
        .await;
    let id = task_id(&r);
    let claimed = tokio::time::timeout(WITHIN, async {
        while first_log.lines_with(&["claimed a task", &id]).is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(claimed.is_ok(), "the first worker never claimed {id}");
    // Its tool runs; then it dies without a word.
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let (_second, _log) = worker(store, &endpoint, "second");
    let r = server.wait_for(&id, TERMINAL, WITHIN).await;
    assert_eq!(r["result"]["status"], "completed", "{r}");

    let request = received
        .span("server", "tools/call mark", |s| s.trace == CALLER_TRACE)
        .await;
    assert_eq!(request.parent, CALLER_SPAN, "{request:#?}");
    assert_eq!(request.attributes["network.transport"], "pipe");
    // Whoever noticed the lapsed lease says so in the task's trace, under the request.
    let takeover = received
        .span(ANY, "mcp_tasks.task.takeover", |s| s.trace == CALLER_TRACE)
        .await;
    assert_eq!(takeover.parent, request.id, "{takeover:#?}");
    assert_eq!(takeover.attributes["mcp_tasks.restart.policy"], "rerun");
    // The rerun on the second worker is a child of the request too, and says it is a rerun.
    let rerun = received
        .span("second", "execute_tool mark", |s| s.trace == CALLER_TRACE)
        .await;
    assert_eq!(rerun.parent, request.id, "{rerun:#?}");
    assert!(
        rerun.attributes["mcp_tasks.task.epoch"]
            .parse::<u64>()
            .unwrap()
            >= 2,
        "{rerun:#?}"
    );
    assert!(
        rerun.events.iter().any(|e| e == "task run again"),
        "{rerun:#?}"
    );
    assert_eq!(rerun.attributes["mcp_tasks.task.status"], "completed");
    received
        .metric("second", "mcp_tasks.task.run.duration")
        .await;
    server.kill().await;
}
