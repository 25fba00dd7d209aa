//! Typed request parameters shared by both eras, and the one place params are decoded. The
//! params an operation takes as they are ([`ListParams`](crate::ops::ListParams),
//! [`CompleteParams`](crate::ops::CompleteParams)) are the operations' own, in `ops`.
//!
//! Each method's params are a `Deserialize` type. [`decode`] reads them from a request, and
//! every way they can be malformed becomes the same [`Error::InvalidParams`] (`-32602`) that
//! names the field at fault. Params only one era has live in that era's module and are decoded
//! here too.

use crate::error::Error;
use crate::jsonrpc::Request;
use crate::model::{JsonObject, LogLevel};
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde_json::Value;
use std::cell::RefCell;

/// Takes a request's params as an object: absent params are an empty object.
pub(crate) fn take_object(request: &mut Request) -> Result<JsonObject, Error> {
    match request.params.take() {
        None => Ok(JsonObject::new()),
        Some(Value::Object(o)) => Ok(o),
        Some(_) => Err(Error::InvalidParams("params must be an object".into())),
    }
}

/// Decodes a request's params (see [`take_object`]) into `T`.
pub(crate) fn decode<T: DeserializeOwned>(request: &mut Request) -> Result<T, Error> {
    from_object(take_object(request)?)
}

/// Decodes params already taken as an object.
pub(crate) fn from_object<T: DeserializeOwned>(object: JsonObject) -> Result<T, Error> {
    decode_at(object, "")
}

/// Decodes one field's value, an object, naming it `path` in errors (`task`, say).
pub(crate) fn field<T: DeserializeOwned>(value: Value, path: &str) -> Result<T, Error> {
    match value {
        Value::Object(o) => decode_at(o, &format!("{path}.")),
        _ => Err(Error::InvalidParams(format!("`{path}` must be an object"))),
    }
}

fn decode_at<T: DeserializeOwned>(object: JsonObject, prefix: &str) -> Result<T, Error> {
    let failed = RefCell::new(None);
    let fields = Fields {
        iter: object.into_iter(),
        value: None,
        failed: &failed,
    };
    T::deserialize(fields).map_err(|e| {
        let message = match failed.into_inner() {
            Some(key) => format!("`{prefix}{key}`: {e}"),
            None if prefix.is_empty() => e.to_string(),
            None => format!("`{}`: {e}", prefix.trim_end_matches('.')),
        };
        Error::InvalidParams(message)
    })
}

/// A params object as a deserializer that remembers which field failed to decode.
struct Fields<'a> {
    iter: serde_json::map::IntoIter,
    value: Option<(String, Value)>,
    failed: &'a RefCell<Option<String>>,
}

impl<'de> de::Deserializer<'de> for Fields<'_> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        let decoded = seed.deserialize(IntoDeserializer::<Self::Error>::into_deserializer(
            key.as_str(),
        ));
        self.value = Some((key, value));
        decoded.map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value without its key"))?;
        seed.deserialize(value).inspect_err(|_| {
            *self.failed.borrow_mut() = Some(key);
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// A `_meta` progress token, when it is a string or an integer; anything else is ignored.
pub(crate) fn progress_token(meta: Option<&Value>) -> Option<Value> {
    meta.and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
        .cloned()
}

/// The idempotency key of a `tools/call`, from its `_meta`
/// ([`IDEMPOTENCY_KEY_META`](crate::idempotency::IDEMPOTENCY_KEY_META)): `None` without
/// one; `-32602` for one that is not a valid key.
pub(crate) fn idempotency_key(
    meta: Option<&Value>,
) -> Result<Option<crate::idempotency::IdempotencyKey>, Error> {
    use crate::idempotency::{IDEMPOTENCY_KEY_META, IdempotencyKey};
    match meta.and_then(|m| m.get(IDEMPOTENCY_KEY_META)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(key)) => IdempotencyKey::new(key.as_str())
            .map(Some)
            .map_err(|e| Error::InvalidParams(format!("`_meta[\"{IDEMPOTENCY_KEY_META}\"]`: {e}"))),
        Some(_) => Err(Error::InvalidParams(format!(
            "`_meta[\"{IDEMPOTENCY_KEY_META}\"]` must be a string"
        ))),
    }
}

/// The W3C trace context a request's `_meta` carries (`traceparent`, `tracestate`,
/// `baggage`), when its `traceparent` is valid; an invalid one is ignored, as W3C Trace
/// Context asks.
pub(crate) fn trace_context(
    meta: Option<&Value>,
) -> Option<std::sync::Arc<crate::task::TraceContext>> {
    let meta = meta?;
    let text = |name: &str| meta.get(name).and_then(Value::as_str);
    crate::task::TraceContext::parse(text("traceparent")?, text("tracestate"), text("baggage"))
        .map(std::sync::Arc::new)
}

/// The params of `prompts/get`.
#[derive(Debug, Deserialize)]
pub(crate) struct GetPromptParams {
    /// The prompt.
    pub(crate) name: String,
    /// Its arguments; checked against the prompt's arguments.
    pub(crate) arguments: Option<JsonObject>,
}

/// The params of `resources/read`, `resources/subscribe` and `resources/unsubscribe`.
#[derive(Debug, Deserialize)]
pub(crate) struct UriParams {
    /// The resource.
    pub(crate) uri: String,
}

/// The params of the `tasks/*` methods that name one task.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskIdParams {
    /// The task.
    pub(crate) task_id: String,
}

/// The params of `logging/setLevel`.
#[derive(Debug, Deserialize)]
pub(crate) struct SetLevelParams {
    /// The least severe level the client wants.
    pub(crate) level: LogLevel,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::ListParams;
    use serde_json::json;

    fn request(params: Value) -> Request {
        Request {
            id: 1.into(),
            method: "m".into(),
            params: Some(params),
        }
    }

    fn message(result: Result<impl std::fmt::Debug, Error>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn every_malformed_param_names_its_field() {
        let bad = |params| message(decode::<GetPromptParams>(&mut request(params)));
        assert_eq!(
            bad(json!({"name": 3})),
            "invalid params: `name`: invalid type: integer `3`, expected a string"
        );
        assert_eq!(bad(json!({})), "invalid params: missing field `name`");
        assert_eq!(
            bad(json!({"name": "p", "arguments": []})),
            "invalid params: `arguments`: invalid type: sequence, expected a map"
        );
        assert_eq!(bad(json!([1])), "invalid params: params must be an object");
        #[derive(Debug, Deserialize)]
        struct Ttl {
            #[allow(dead_code)]
            ttl: Option<u64>,
        }
        assert_eq!(
            message(field::<Ttl>(json!({"ttl": -1}), "task")),
            "invalid params: `task.ttl`: invalid value: integer `-1`, expected u64"
        );
        assert_eq!(
            message(field::<Ttl>(json!(1), "task")),
            "invalid params: `task` must be an object"
        );
    }

    #[test]
    fn absent_params_and_nulls_read_as_defaults() {
        let mut none = Request {
            id: 1.into(),
            method: "m".into(),
            params: None,
        };
        assert!(decode::<ListParams>(&mut none).unwrap().cursor.is_none());
        let list: ListParams = decode(&mut request(json!({"cursor": null, "x": 1}))).unwrap();
        assert!(list.cursor.is_none());
        let level: SetLevelParams = decode(&mut request(json!({"level": "warning"}))).unwrap();
        assert_eq!(level.level, LogLevel::Warning);
        let e = message(decode::<SetLevelParams>(&mut request(
            json!({"level": "loud"}),
        )));
        assert!(
            e.starts_with("invalid params: `level`: unknown variant `loud`"),
            "{e}"
        );
    }
}
