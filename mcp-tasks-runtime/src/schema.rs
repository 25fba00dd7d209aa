//! JSON Schemas for tool inputs and outputs (draft 2020-12, root `type: object`), made with
//! schemars and cached per type.

use crate::model::JsonObject;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn cached<T: JsonSchema + 'static>(kind: u8, make: fn(Value) -> JsonObject) -> JsonObject {
    static CACHE: OnceLock<Mutex<HashMap<(TypeId, u8), JsonObject>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (TypeId::of::<T>(), kind);
    if let Some(hit) = cache.lock().expect("schema cache").get(&key) {
        return hit.clone();
    }
    let generator = SchemaSettings::draft2020_12().into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let made = make(schema.to_value());
    cache
        .lock()
        .expect("schema cache")
        .insert(key, made.clone());
    made
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
pub fn output_schema<T: JsonSchema + 'static>() -> JsonObject {
    cached::<T>(1, object_root)
}

/// The `requestedSchema` of an elicitation form shaped like `T`.
pub fn elicitation_schema<T: JsonSchema + 'static>() -> JsonObject {
    cached::<T>(2, |v| {
        let mut obj = object_root(v);
        obj.remove("$schema");
        obj
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        pages: u32,
        title: Option<String>,
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
