//! The spans of requests and task runs, named and attributed after the OpenTelemetry
//! semantic conventions for MCP (and GenAI's `execute_tool` for a task's run), and, with
//! the `otel` feature, their trace context and metrics.
//!
//! A request's span is `{mcp.method.name} {target}` (the tool or prompt), kind server. A
//! task's run is `execute_tool {gen_ai.tool.name}`, a child of the span of the request that
//! created the task, on whichever process runs it. A task id is a bearer handle: spans
//! carry its first characters only (`mcp.task.id`).
//!
//! A request's span is at `debug` level under the target `mcp_tasks::request`, as per-request
//! spans of HTTP servers usually are: a subscriber that logs at `info` neither makes nor
//! formats one per request, and OpenTelemetry's layer, as this crate installs it, takes
//! them.

use crate::jsonrpc::{ErrorObject, Payload, Request};
use crate::trace_context::{REQUEST_TARGET, TraceContext};
use serde_json::Value;
use std::sync::Arc;
use tracing::field::Empty;

/// What a transport tells about a connection, for the spans of its requests.
#[derive(Clone, Debug)]
pub(crate) struct Wire {
    /// `network.transport`: `pipe` (stdio) or `tcp` (HTTP).
    pub(crate) transport: &'static str,
    /// `network.protocol.name`: `http` over Streamable HTTP.
    pub(crate) protocol: Option<&'static str>,
    /// `mcp.session.id`: the first characters of an HTTP session's `Mcp-Session-Id`.
    pub(crate) session: Option<Arc<str>>,
}

/// The first 8 characters of a task id: enough to tell tasks apart in a trace, too few to
/// reach one (a task without a principal is reached with its id alone).
pub(crate) fn short(id: &str) -> &str {
    let end = id.char_indices().nth(8).map_or(id.len(), |(at, _)| at);
    &id[..end]
}

/// The span of one request, and what its end records.
pub(crate) struct RequestSpan {
    pub(crate) span: tracing::Span,
    #[cfg(feature = "otel")]
    started: std::time::Instant,
    #[cfg(feature = "otel")]
    attributes: Vec<opentelemetry::KeyValue>,
}

/// Opens the span of `request`, of protocol `version`, on a connection its transport told
/// `wire` about; with the `otel` feature its parent is the trace context of the request's
/// `_meta` (which the HTTP transport fills from the headers).
pub(crate) fn request(
    request: &Request,
    version: Option<&str>,
    wire: Option<&Wire>,
) -> RequestSpan {
    let params = request.params.as_ref();
    let text = |key: &str| params.and_then(|p| p.get(key)).and_then(Value::as_str);
    let method = request.method.as_str();
    let (tool, prompt) = match method {
        "tools/call" => (text("name"), None),
        "prompts/get" => (None, text("name")),
        _ => (None, None),
    };
    let span = tracing::debug_span!(
        target: REQUEST_TARGET,
        "request",
        otel.name = Empty,
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = method,
        jsonrpc.request.id = %request.id,
        gen_ai.tool.name = tool,
        gen_ai.operation.name = tool.map(|_| "execute_tool"),
        gen_ai.prompt.name = prompt,
        mcp.resource.uri = text("uri"),
        mcp.task.id = text("taskId").map(short),
        mcp.session.id = Empty,
        mcp.protocol.version = Empty,
        network.transport = Empty,
        network.protocol.name = Empty,
        error.type = Empty,
        rpc.response.status_code = Empty,
    );
    if !span.is_disabled() {
        match tool.or(prompt) {
            Some(target) => span.record("otel.name", format!("{method} {target}")),
            None => span.record("otel.name", method),
        };
        if let Some(version) = version {
            span.record("mcp.protocol.version", version);
        }
        if let Some(wire) = wire {
            span.record("network.transport", wire.transport);
            if let Some(protocol) = wire.protocol {
                span.record("network.protocol.name", protocol);
            }
            if let Some(session) = &wire.session {
                span.record("mcp.session.id", &**session);
            }
        }
        #[cfg(feature = "otel")]
        crate::otel::adopt(&span, params);
    }
    #[cfg(feature = "otel")]
    let attributes = if crate::otel::instruments().is_none() {
        Vec::new()
    } else {
        use opentelemetry::KeyValue;
        let mut attributes = vec![KeyValue::new("mcp.method.name", method.to_owned())];
        if let Some(tool) = tool {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
        }
        if let Some(prompt) = prompt {
            attributes.push(KeyValue::new("gen_ai.prompt.name", prompt.to_owned()));
        }
        if let Some(version) = version {
            attributes.push(KeyValue::new("mcp.protocol.version", version.to_owned()));
        }
        if let Some(wire) = wire {
            attributes.push(KeyValue::new("network.transport", wire.transport));
        }
        attributes
    };
    RequestSpan {
        span,
        #[cfg(feature = "otel")]
        started: std::time::Instant::now(),
        #[cfg(feature = "otel")]
        attributes,
    }
}

impl RequestSpan {
    /// Records how the request ended: `error.type` (the JSON-RPC error code, `tool_error`
    /// for a tool's error result, `cancelled` for a request cancelled unanswered) and, with
    /// the `otel` feature, its duration (`mcp.server.operation.duration`).
    pub(crate) fn end(self, outcome: Option<&Result<Payload, ErrorObject>>) {
        let error: Option<(String, Option<i32>)> = match outcome {
            None => Some(("cancelled".into(), None)),
            Some(Err(e)) => Some((e.code.to_string(), Some(e.code))),
            Some(Ok(payload)) if payload.is_tool_error() => Some(("tool_error".into(), None)),
            Some(Ok(_)) => None,
        };
        if let Some((kind, code)) = &error {
            self.span.record("error.type", kind.as_str());
            self.span.record("otel.status_code", "error");
            if let Some(code) = code {
                self.span
                    .record("rpc.response.status_code", code.to_string());
            }
        }
        #[cfg(feature = "otel")]
        {
            let mut attributes = self.attributes;
            if let Some((kind, _)) = error {
                attributes.push(opentelemetry::KeyValue::new("error.type", kind));
            }
            crate::otel::record_operation(self.started.elapsed(), &attributes);
        }
    }
}

/// The trace context of the current span (with the `otel` feature, when OpenTelemetry
/// records it), and the task id recorded on that span (the request that creates the task).
pub(crate) fn creating(id: &str) -> Option<TraceContext> {
    let current = tracing::Span::current();
    current.record("mcp.task.id", short(id));
    #[cfg(feature = "otel")]
    return crate::otel::trace_of(&current);
    #[cfg(not(feature = "otel"))]
    None
}

/// The span of one run of task `id`'s tool on process `worker`: `execute_tool {tool}`, a
/// child of `trace` (the span that created the task). A run after the first (a rerun, or a
/// takeover after its runner stopped; `previous` ran it before) says so in an event.
pub(crate) fn run(
    id: &str,
    tool: &str,
    epoch: u64,
    worker: &str,
    trace: Option<&TraceContext>,
    previous: Option<&str>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "task",
        otel.name = Empty,
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        mcp.task.id = short(id),
        mcp_tasks.task.epoch = epoch,
        mcp_tasks.worker = worker,
        mcp_tasks.task.status = Empty,
        error.type = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    span.record("otel.name", format!("execute_tool {tool}"));
    #[cfg(feature = "otel")]
    if let Some(trace) = trace {
        crate::otel::set_parent(&span, trace);
    }
    #[cfg(not(feature = "otel"))]
    let _ = trace;
    if epoch > 1 {
        span.in_scope(|| {
            tracing::info!(
                mcp_tasks.task.epoch = epoch,
                mcp_tasks.previous_worker = previous.unwrap_or_default(),
                "task run again"
            );
        });
    }
    span
}

/// Records how a run ended on its span, and with the `otel` feature its duration and the
/// status it reached.
pub(crate) fn run_ended(
    span: &tracing::Span,
    tool: &str,
    status: &'static str,
    elapsed: std::time::Duration,
) {
    span.record("mcp_tasks.task.status", status);
    if matches!(status, "failed" | "lease lost") {
        span.record("otel.status_code", "error");
        span.record("error.type", status);
    }
    #[cfg(feature = "otel")]
    if let Some(instruments) = crate::otel::instruments() {
        use opentelemetry::KeyValue;
        let attributes = [
            KeyValue::new("gen_ai.tool.name", tool.to_owned()),
            KeyValue::new("mcp_tasks.task.status", status),
        ];
        instruments.run.record(elapsed.as_secs_f64(), &attributes);
        instruments.status.add(1, &attributes);
        instruments.running.add(-1, &attributes[..1]);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (tool, elapsed);
}

/// A run starts (the running count, with the `otel` feature).
pub(crate) fn run_started(tool: &str) {
    #[cfg(feature = "otel")]
    if let Some(instruments) = crate::otel::instruments() {
        instruments.running.add(
            1,
            &[opentelemetry::KeyValue::new(
                "gen_ai.tool.name",
                tool.to_owned(),
            )],
        );
    }
    #[cfg(not(feature = "otel"))]
    let _ = tool;
}

/// A task was created (`working`, with the `otel` feature).
pub(crate) fn task_created(tool: &str) {
    #[cfg(feature = "otel")]
    if let Some(instruments) = crate::otel::instruments() {
        instruments.status.add(
            1,
            &[
                opentelemetry::KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                opentelemetry::KeyValue::new("mcp_tasks.task.status", "working"),
            ],
        );
    }
    #[cfg(not(feature = "otel"))]
    let _ = tool;
}

/// How many tasks created here wait in the store (with the `otel` feature).
pub(crate) fn queue_depth(queued: usize) {
    #[cfg(feature = "otel")]
    if let Some(instruments) = crate::otel::instruments() {
        instruments.queued.record(queued as u64, &[]);
    }
    #[cfg(not(feature = "otel"))]
    let _ = queued;
}

/// This process (`worker`) took over task `id` of `tool`, whose runner (`lapsed`) let its
/// lease lapse: a span of its own in the task's trace, and (with the `otel` feature) the
/// takeover count.
pub(crate) fn takeover(
    id: &str,
    tool: &str,
    trace: Option<&TraceContext>,
    lapsed: Option<&str>,
    worker: &str,
    rerun: bool,
) {
    let policy = if rerun { "rerun" } else { "fail" };
    let span = tracing::info_span!(
        "takeover",
        otel.name = "mcp_tasks.task.takeover",
        otel.kind = "internal",
        gen_ai.tool.name = tool,
        mcp.task.id = short(id),
        mcp_tasks.worker = worker,
        mcp_tasks.previous_worker = lapsed.unwrap_or_default(),
        mcp_tasks.restart.policy = policy,
    );
    #[cfg(feature = "otel")]
    {
        if let Some(trace) = trace {
            crate::otel::set_parent(&span, trace);
        }
        if let Some(instruments) = crate::otel::instruments() {
            instruments.takeovers.add(
                1,
                &[
                    opentelemetry::KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                    opentelemetry::KeyValue::new("mcp_tasks.restart.policy", policy),
                ],
            );
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = trace;
    span.in_scope(|| tracing::info!("took over a task whose runner's lease lapsed"));
}

/// A tool asks its client (elicitation, sampling, roots): the question carries the current
/// trace context in its `_meta` (with the `otel` feature), and the current span (a task's
/// run, or a call's request) notes it.
pub(crate) fn asking(method: &str, params: &mut Value) {
    #[cfg(feature = "otel")]
    crate::otel::inject(params);
    #[cfg(not(feature = "otel"))]
    let _ = params;
    tracing::info!(mcp.method.name = method, "input requested");
}

/// The answer to a tool's question came.
pub(crate) fn answered(method: &str, ok: bool) {
    tracing::info!(mcp.method.name = method, answered = ok, "input received");
}
