//! W3C trace context in and out: from a request's `_meta` (or a task's stored context) to
//! the parent of a span, and from the current span to the `_meta` of a request the server
//! sends.
//!
//! A trace context is the task record's [`TraceContext`]; the propagators check it (an
//! invalid `traceparent` names no parent, as W3C asks).

use crate::trace_context::TraceContext;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The three `_meta` keys of W3C trace context, as MCP carries them (SEP-414).
const KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

struct Values<'a>(&'a TraceContext);

impl Extractor for Values<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(&self.0.traceparent),
            "tracestate" => self.0.tracestate.as_deref(),
            "baggage" => self.0.baggage.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        KEYS.to_vec()
    }
}

/// Collects what a propagator writes.
#[derive(Default)]
struct Written(Vec<(String, String)>);

impl Injector for Written {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

impl Written {
    fn take(&mut self, key: &str) -> Option<String> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.swap_remove(at).1)
    }
}

/// The OpenTelemetry context a W3C trace context names: a remote span, with its trace
/// state, and the baggage.
fn context_of(trace: &TraceContext) -> Context {
    let cx = TraceContextPropagator::new().extract(&Values(trace));
    BaggagePropagator::new().extract_with_context(&cx, &Values(trace))
}

/// Makes `trace` the parent of `span` (which must not have been entered yet), when its
/// `traceparent` is valid.
pub(crate) fn set_parent(span: &tracing::Span, trace: &TraceContext) {
    let cx = context_of(trace);
    if cx.span().span_context().is_valid() {
        // Fails only when the span is disabled or was entered already: it then keeps its
        // parent.
        let _ = span.set_parent(cx);
    }
}

/// Makes the trace context of a request's `_meta` the parent of its span.
pub(crate) fn adopt(span: &tracing::Span, params: Option<&Value>) {
    let Some(meta) = params.and_then(|p| p.get("_meta")) else {
        return;
    };
    let text = |key: &str| meta.get(key).and_then(Value::as_str);
    if let Some(trace) =
        text(KEYS[0]).and_then(|parent| TraceContext::parse(parent, text(KEYS[1]), text(KEYS[2])))
    {
        set_parent(span, &trace);
    }
}

/// The W3C trace context of `span`, when OpenTelemetry records it.
pub(crate) fn trace_of(span: &tracing::Span) -> Option<TraceContext> {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut out = Written::default();
    TraceContextPropagator::new().inject_context(&cx, &mut out);
    BaggagePropagator::new().inject_context(&cx, &mut out);
    let traceparent = out.take(KEYS[0])?;
    let tracestate = out.take(KEYS[1]).filter(|v| !v.is_empty());
    let baggage = out.take(KEYS[2]).filter(|v| !v.is_empty());
    TraceContext::parse(&traceparent, tracestate.as_deref(), baggage.as_deref())
}

/// Writes the current span's trace context into `_meta` of `params` (an object), unless
/// `_meta` carries a `traceparent` already.
pub(crate) fn inject(params: &mut Value) {
    let Value::Object(params) = params else {
        return;
    };
    let Some(trace) = trace_of(&tracing::Span::current()) else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return;
    };
    if meta.contains_key(KEYS[0]) {
        return;
    }
    meta.insert(KEYS[0].into(), Value::String(trace.traceparent));
    if let Some(state) = trace.tracestate {
        meta.insert(KEYS[1].into(), Value::String(state));
    }
    if let Some(baggage) = trace.baggage {
        meta.insert(KEYS[2].into(), Value::String(baggage));
    }
}
