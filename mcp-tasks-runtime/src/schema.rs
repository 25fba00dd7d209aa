//! JSON Schemas for tool inputs and outputs (draft 2020-12, root `type: object`), made with
//! schemars and cached per type.
//!
//! The schemas use standard JSON Schema only. schemars marks Rust's number types with formats
//! of its own (`"format": "uint32"`, `"int64"`, `"double"`, ...), which validators such as Ajv
//! (used by the MCP Inspector and many clients) warn about on every call; here such a format
//! is replaced by the integer bounds it stands for (`minimum: 0`, `maximum: 4294967295`).

use crate::model::ANSWER_ERROR;
use crate::model::{InputRequest, JsonObject};
use crate::sync::LockExt;
use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema};
use serde_json::Value;
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn cached<T: JsonSchema + 'static>(kind: u8, make: fn(Value) -> JsonObject) -> JsonObject {
    static CACHE: OnceLock<Mutex<HashMap<(TypeId, u8), JsonObject>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (TypeId::of::<T>(), kind);
    if let Some(hit) = cache.locked().get(&key) {
        return hit.clone();
    }
    let generator = SchemaSettings::draft2020_12()
        .with_transform(StandardFormats)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let made = make(schema.to_value());
    cache.locked().insert(key, made.clone());
    made
}

/// The formats JSON Schema 2020-12 defines (its "format" vocabulary); any other is dropped.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// The range of values of schemars' integer formats (`None` where JSON numbers cannot say it:
/// the 128-bit types).
fn integer_bounds(format: &str) -> Option<(Option<Value>, Option<Value>)> {
    fn range<T: Into<Value>>(min: T, max: T) -> Option<(Option<Value>, Option<Value>)> {
        Some((Some(min.into()), Some(max.into())))
    }
    match format {
        "int8" => range(i8::MIN, i8::MAX),
        "int16" => range(i16::MIN, i16::MAX),
        "int32" => range(i32::MIN, i32::MAX),
        "int64" => range(i64::MIN, i64::MAX),
        "int" => range(isize::MIN as i64, isize::MAX as i64),
        "int128" => Some((None, None)),
        "uint8" => range(u8::MIN, u8::MAX),
        "uint16" => range(u16::MIN, u16::MAX),
        "uint32" => range(u32::MIN, u32::MAX),
        "uint64" => range(u64::MIN, u64::MAX),
        "uint" => range(usize::MIN as u64, usize::MAX as u64),
        "uint128" => Some((Some(0.into()), None)),
        _ => None,
    }
}

/// Replaces schemars' non-standard formats with standard keywords, in every subschema.
#[derive(Clone, Copy, Debug)]
struct StandardFormats;

impl Transform for StandardFormats {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(obj) = schema.as_object_mut() else {
            return;
        };
        let Some(format) = obj.get("format").and_then(Value::as_str) else {
            return;
        };
        if STANDARD_FORMATS.contains(&format) {
            return;
        }
        let bounds = integer_bounds(format);
        obj.remove("format");
        if let Some((minimum, maximum)) = bounds {
            // A bound schemars already set (`NonZeroU32`'s `minimum: 1`) is the tighter one.
            if let Some(minimum) = minimum {
                obj.entry("minimum").or_insert(minimum);
            }
            if let Some(maximum) = maximum {
                obj.entry("maximum").or_insert(maximum);
            }
        }
    }
}

fn object_root(value: Value) -> JsonObject {
    let Value::Object(mut obj) = value else {
        return JsonObject::new();
    };
    // The generated input type's Rust name means nothing to a client.
    obj.remove("title");
    if !obj.contains_key("type") {
        obj.insert("type".into(), "object".into());
    }
    obj
}

/// The input schema of a tool whose arguments deserialize into `T`.
pub fn input_schema<T: JsonSchema + 'static>() -> JsonObject {
    cached::<T>(0, object_root)
}

/// The output schema of a tool whose structured content serializes from `T`.
///
/// Its root says `"type": "object"` when `T`'s JSON is always an object: a struct, a map, or an
/// enum each of whose variants is one. Any other root (an array, a string, a union with a
/// non-object branch) is left as schemars made it, and the server refuses to build with it.
pub fn output_schema<T: JsonSchema + 'static>() -> JsonObject {
    cached::<T>(1, |value| {
        let Value::Object(mut obj) = value else {
            return JsonObject::new();
        };
        obj.remove("title");
        if !obj.contains_key("type") && always_object(&obj, &obj) {
            obj.insert("type".into(), "object".into());
        }
        obj
    })
}

/// Whether every value `schema` accepts is an object: it says `"type": "object"`, refers to a
/// definition that does, or is a `oneOf`/`anyOf` of such schemas.
fn always_object(schema: &JsonObject, root: &JsonObject) -> bool {
    always_object_at(schema, root, 0)
}

fn always_object_at(schema: &JsonObject, root: &JsonObject, depth: usize) -> bool {
    if depth > 16 {
        return false;
    }
    if let Some(ty) = schema.get("type") {
        return ty == "object";
    }
    if let Some(Value::String(reference)) = schema.get("$ref") {
        let target = reference
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs")?.get(name)?.as_object());
        return target.is_some_and(|t| always_object_at(t, root, depth + 1));
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = schema.get(key) {
            return !branches.is_empty()
                && branches.iter().all(|b| {
                    b.as_object()
                        .is_some_and(|b| always_object_at(b, root, depth + 1))
                });
        }
    }
    false
}

/// The `requestedSchema` of an elicitation form shaped like `T`.
pub fn elicitation_schema<T: JsonSchema + 'static>() -> JsonObject {
    cached::<T>(2, |v| {
        let mut obj = object_root(v);
        obj.remove("$schema");
        obj
    })
}

/// Checks a client's answer to one of a tool's questions before the tool gets it: the
/// content of an accepted `elicitation/create` form must match the question's
/// `requestedSchema` (its types, `required`, `enum`, bounds and lengths, and `format`s).
/// `Err` says what is wrong, naming the field. Other questions, declined or cancelled
/// forms, URL-mode elicitations and a client's error answers pass.
pub(crate) fn check_answer(question: &InputRequest, answer: &Value) -> Result<(), String> {
    if question.method != "elicitation/create" || answer.get(ANSWER_ERROR).is_some() {
        return Ok(());
    }
    let action = answer.get("action").and_then(Value::as_str);
    match action {
        Some("accept") => {}
        Some("decline" | "cancel") => return Ok(()),
        _ => {
            return Err(format!(
                "`action` must be \"accept\", \"decline\" or \"cancel\", not {}",
                answer
                    .get("action")
                    .map_or("missing".into(), Value::to_string)
            ));
        }
    }
    let Some(schema) = question.params.get("requestedSchema") else {
        return Ok(());
    };
    let content = match answer.get("content") {
        None | Some(Value::Null) => &Value::Object(JsonObject::new()),
        Some(content) => content,
    };
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("the question's requestedSchema is not a valid schema: {e}"))?;
    let problems: Vec<String> = validator
        .iter_errors(content)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                format!("`content`: {e}")
            } else {
                format!("`content{path}`: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the accepted content does not match the requestedSchema: {}",
            problems.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question(schema: Value) -> InputRequest {
        InputRequest {
            method: "elicitation/create".into(),
            params: json!({"message": "?", "requestedSchema": schema}),
            key: None,
        }
    }

    #[test]
    fn answers_are_checked_against_the_requested_schema() {
        let q = question(json!({"type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 2},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "size": {"type": "string", "enum": ["s", "m", "l"]},
                "email": {"type": "string", "format": "email"},
                "ok": {"type": "boolean"}
            },
            "required": ["name"]}));
        let accept = |content: Value| json!({"action": "accept", "content": content});
        assert_eq!(
            check_answer(&q, &accept(json!({"name": "Ada", "age": 36}))),
            Ok(())
        );
        assert_eq!(check_answer(&q, &json!({"action": "decline"})), Ok(()));
        assert_eq!(check_answer(&q, &json!({"action": "cancel"})), Ok(()));
        for (content, names) in [
            (json!({"age": 3}), "name"),
            (json!({"name": 5}), "/name"),
            (json!({"name": "A"}), "/name"),
            (json!({"name": "Ada", "age": -1}), "/age"),
            (json!({"name": "Ada", "age": 1.5}), "/age"),
            (json!({"name": "Ada", "size": "xl"}), "/size"),
            (json!({"name": "Ada", "email": "nope"}), "/email"),
            (json!({"name": "Ada", "ok": "yes"}), "/ok"),
        ] {
            let e = check_answer(&q, &accept(content.clone())).unwrap_err();
            assert!(e.contains(names), "{content}: {e}");
        }
        assert!(check_answer(&q, &json!({"action": "accept"})).is_err());
        assert!(
            check_answer(&q, &json!({"action": "maybe"}))
                .unwrap_err()
                .contains("action")
        );
        // Not a form: nothing to check.
        let sampling = InputRequest {
            method: "sampling/createMessage".into(),
            params: json!({}),
            key: None,
        };
        assert_eq!(check_answer(&sampling, &json!({"anything": 1})), Ok(()));
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        pages: u32,
        title: Option<String>,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Numbers {
        byte: u8,
        count: u32,
        offset: i64,
        size: usize,
        ratio: f64,
        nonzero: std::num::NonZeroU16,
        maybe: Option<u64>,
        list: Vec<i32>,
        nested: Nested,
        when: Stamp,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Nested {
        small: i8,
    }

    /// A type whose schema carries a standard format.
    struct Stamp;

    impl JsonSchema for Stamp {
        fn schema_name() -> std::borrow::Cow<'static, str> {
            "Stamp".into()
        }

        fn json_schema(_: &mut schemars::SchemaGenerator) -> Schema {
            schemars::json_schema!({ "type": "string", "format": "date-time" })
        }
    }

    /// Every `format` anywhere in a schema.
    fn formats(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(obj) => {
                if let Some(Value::String(format)) = obj.get("format") {
                    out.push(format.clone());
                }
                obj.values().for_each(|v| formats(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| formats(v, out)),
            _ => {}
        }
    }

    #[test]
    fn number_formats_become_standard_bounds() {
        let schema = Value::Object(input_schema::<Numbers>());
        let mut found = Vec::new();
        formats(&schema, &mut found);
        assert_eq!(found, ["date-time"], "{schema:#}");
        let props = &schema["properties"];
        assert_eq!(props["byte"]["minimum"], 0);
        assert_eq!(props["byte"]["maximum"], 255);
        assert_eq!(props["count"]["maximum"], u32::MAX);
        assert_eq!(props["offset"]["minimum"], i64::MIN);
        assert_eq!(props["size"]["minimum"], 0);
        assert!(props["ratio"].get("minimum").is_none());
        assert_eq!(props["nonzero"]["minimum"], 1);
        assert_eq!(props["nonzero"]["maximum"], u16::MAX);
        assert_eq!(props["maybe"]["maximum"], u64::MAX);
        assert_eq!(props["list"]["items"]["minimum"], i32::MIN);
        let small = &schema["$defs"]["Nested"]["properties"]["small"];
        assert_eq!(small["minimum"], -128);
        assert_eq!(small["maximum"], 127);
    }

    #[test]
    fn output_schemas_use_standard_formats_too() {
        let schema = Value::Object(output_schema::<Nested>());
        let mut found = Vec::new();
        formats(&schema, &mut found);
        assert!(found.is_empty(), "{schema:#}");
    }

    /// Internally tagged: every variant is an object.
    #[derive(JsonSchema)]
    #[serde(tag = "kind")]
    #[allow(dead_code)]
    enum Shape {
        Circle { radius: f64 },
        Square { side: f64 },
    }

    /// Externally tagged with a unit variant: `"Empty"` is a string.
    #[derive(JsonSchema)]
    #[allow(dead_code)]
    enum Mixed {
        Empty,
        Full { items: Vec<u32> },
    }

    #[test]
    fn output_schemas_are_objects_only_when_every_value_is_one() {
        assert_eq!(output_schema::<Nested>()["type"], "object");
        assert_eq!(output_schema::<Shape>()["type"], "object");
        let map = output_schema::<std::collections::BTreeMap<String, u32>>();
        assert_eq!(map["type"], "object");
        assert_eq!(output_schema::<Vec<String>>()["type"], "array");
        assert_eq!(output_schema::<String>()["type"], "string");
        assert!(output_schema::<Mixed>().get("type").is_none());
        assert!(output_schema::<Option<Nested>>().get("type").is_none());
        assert!(output_schema::<Value>().get("type").is_none());
    }

    #[test]
    fn input_schema_is_an_untitled_object() {
        let schema = input_schema::<Args>();
        assert_eq!(schema["type"], "object");
        assert!(schema.get("title").is_none());
        assert_eq!(schema["required"], serde_json::json!(["pages"]));
        assert!(schema["$schema"].as_str().unwrap().contains("2020-12"));
    }
}
