//! Tool arguments from the command line: `key=value` words read by the tool's input schema.

use serde_json::{Map, Value};

/// Builds the arguments object of a call from `key=value` words (or one JSON object word),
/// reading each value as the schema's type for that key.
pub fn parse(tool: &str, schema: &Value, words: &[String]) -> Result<Value, String> {
    if let [only] = words
        && only.trim_start().starts_with('{')
    {
        return match serde_json::from_str::<Value>(only) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) | Err(_) => Err(format!("`{only}` is not a JSON object")),
        };
    }
    let properties = schema["properties"].as_object();
    let closed = schema["additionalProperties"] == Value::Bool(false);
    let mut args = Map::new();
    for word in words {
        let Some((key, raw)) = word.split_once('=') else {
            return Err(format!(
                "`{word}` is not `key=value`; pass arguments as key=value or one JSON object"
            ));
        };
        let property = properties.and_then(|p| p.get(key));
        if property.is_none() && closed {
            let known: Vec<&str> = properties
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            return Err(format!(
                "tool `{tool}` has no argument `{key}`; it takes: {}",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        }
        let value = read(key, raw, property.unwrap_or(&Value::Null))?;
        args.insert(key.to_owned(), value);
    }
    Ok(Value::Object(args))
}

/// One value as its schema's type says: integers, numbers, booleans, strings, and JSON for
/// objects and arrays. Without a type, JSON if it parses, else a string.
pub fn read(key: &str, raw: &str, property: &Value) -> Result<Value, String> {
    let types: Vec<&str> = match &property["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let wants = |t: &str| types.contains(&t);
    if types.is_empty() {
        return Ok(serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())));
    }
    if wants("null") && raw == "null" {
        return Ok(Value::Null);
    }
    if wants("integer")
        && let Ok(n) = raw.parse::<i64>()
    {
        return Ok(n.into());
    }
    if wants("number")
        && let Ok(n) = raw.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(n)
    {
        return Ok(Value::Number(n));
    }
    if wants("boolean") {
        match raw.to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "1" => return Ok(true.into()),
            "false" | "no" | "n" | "0" => return Ok(false.into()),
            _ => {}
        }
    }
    if (wants("object") || wants("array"))
        && let Ok(v) = serde_json::from_str::<Value>(raw)
        && (v.is_object() && wants("object") || v.is_array() && wants("array"))
    {
        return Ok(v);
    }
    if wants("string") {
        return Ok(Value::String(raw.to_owned()));
    }
    Err(format!(
        "`{key}` must be {}, not `{raw}`",
        types
            .iter()
            .map(|t| match *t {
                "integer" => "an integer",
                "number" => "a number",
                "boolean" => "true or false",
                "object" => "a JSON object",
                "array" => "a JSON array",
                other => other,
            })
            .collect::<Vec<_>>()
            .join(" or ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn values_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"},
            "s": {"type": "string"}, "o": {"type": "object"}, "a": {"type": ["array", "null"]}
        }});
        let args = parse(
            "t",
            &schema,
            &words(&[
                "n=3",
                "x=2.5",
                "b=yes",
                "s=42",
                "o={\"k\":1}",
                "a=[1,2]",
                "free=7",
            ]),
        )
        .unwrap();
        assert_eq!(
            args,
            json!({"n": 3, "x": 2.5, "b": true, "s": "42", "o": {"k": 1}, "a": [1, 2], "free": 7})
        );
    }

    #[test]
    fn bad_values_name_the_key_and_the_type() {
        let schema =
            json!({"properties": {"n": {"type": "integer"}}, "additionalProperties": false});
        assert_eq!(
            parse("t", &schema, &words(&["n=abc"])).unwrap_err(),
            "`n` must be an integer, not `abc`"
        );
        assert_eq!(
            parse("t", &schema, &words(&["m=1"])).unwrap_err(),
            "tool `t` has no argument `m`; it takes: n"
        );
        assert!(
            parse("t", &schema, &words(&["n"]))
                .unwrap_err()
                .contains("key=value")
        );
    }

    #[test]
    fn one_json_object_is_all_the_arguments() {
        let args = parse("t", &json!({}), &words(&[r#"{"a": [1]}"#])).unwrap();
        assert_eq!(args, json!({"a": [1]}));
        assert!(parse("t", &json!({}), &words(&["{nope"])).is_err());
    }
}
