//! The W3C trace context a task keeps, and the `tracing` target of request spans (a module
//! of its own, so that the spans and OpenTelemetry can name them without depending on the
//! task model or on each other).

use serde::{Deserialize, Serialize};

/// The `tracing` target of request spans, which are at `debug` level:
/// `RUST_LOG=mcp_tasks::request=debug` shows them in logs.
pub const REQUEST_TARGET: &str = "mcp_tasks::request";

/// The W3C trace context of the request that created a task (`traceparent`, `tracestate`,
/// `baggage`, as the request's `_meta` or HTTP headers carried them), kept with the task so
/// that its run, on whichever process claims it, joins the caller's trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TraceContext {
    /// The `traceparent` value (`00-<trace id>-<parent id>-<flags>`).
    pub traceparent: String,
    /// The `tracestate` value, when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// The `baggage` value, when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baggage: Option<String>,
}

impl TraceContext {
    /// The longest `tracestate` or `baggage` value kept (W3C's own limits are 512 and 8,192
    /// bytes); a longer one is left out.
    pub const MAX_VALUE_LEN: usize = 8192;

    /// A context from the three values, or `None` when `traceparent` is not a W3C
    /// `traceparent` of version `00` (two lowercase hex ids, neither all zeros). A
    /// `tracestate` or `baggage` longer than [`MAX_VALUE_LEN`](Self::MAX_VALUE_LEN) is
    /// dropped.
    pub fn parse(
        traceparent: &str,
        tracestate: Option<&str>,
        baggage: Option<&str>,
    ) -> Option<Self> {
        let traceparent = traceparent.trim();
        let parts: Vec<&str> = traceparent.split('-').collect();
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let [version, trace, parent, flags] = parts.as_slice() else {
            return None;
        };
        let valid = *version == "00"
            && hex(trace, 32)
            && hex(parent, 16)
            && hex(flags, 2)
            && trace.bytes().any(|b| b != b'0')
            && parent.bytes().any(|b| b != b'0');
        if !valid {
            return None;
        }
        let keep = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty() && v.len() <= Self::MAX_VALUE_LEN)
                .map(str::to_owned)
        };
        Some(Self {
            traceparent: traceparent.to_owned(),
            tracestate: keep(tracestate),
            baggage: keep(baggage),
        })
    }

    /// The 32 hex digits of the trace id.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }
}
