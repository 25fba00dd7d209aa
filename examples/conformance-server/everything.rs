//! More "everything server" fixtures of the conformance suite: elicitation forms (SEP-1034,
//! SEP-1330), the stateless-era probes (`server-stateless`), the MRTR tools of the
//! `input-required-result-*` scenarios, two tools that show a question resumes its call
//! instead of running it again (`side_effect_then_ask`, `side_effect_count`), and two tools
//! whose input schema is written by hand (JSON Schema 2020-12 keywords, an `x-mcp-header`
//! parameter).

use mcp_tasks::model::{CallToolResult, Content, ElicitResult};
use mcp_tasks::prelude::*;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

/// `Elicitation completed: action=…, content={…}`.
fn completed(result: &ElicitResult) -> String {
    format!(
        "Elicitation completed: action={}, content={}",
        json!(result.action).as_str().unwrap_or_default(),
        json!(result.content.clone().unwrap_or_default())
    )
}

/// Asks for a form whose fields all have defaults (SEP-1034).
#[task_tool(mode = "forbidden")]
async fn test_elicitation_sep1034_defaults(client: Client) -> Result<String, ToolError> {
    let result = client
        .elicit(
            "Please review and update the form fields with defaults",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {
                        "type": "string",
                        "description": "User status",
                        "enum": ["active", "inactive", "pending"],
                        "default": "active"
                    },
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}
                }
            }),
        )
        .await?;
    Ok(completed(&result))
}

/// Asks for a form with every kind of enum field (SEP-1330).
#[task_tool(mode = "forbidden")]
async fn test_elicitation_sep1330_enums(client: Client) -> Result<String, ToolError> {
    let result = client
        .elicit(
            "Please select options from the enum fields",
            json!({
                "type": "object",
                "properties": {
                    "untitledSingle": {
                        "type": "string",
                        "description": "Select one option",
                        "enum": ["option1", "option2", "option3"]
                    },
                    "titledSingle": {
                        "type": "string",
                        "description": "Select one option with titles",
                        "oneOf": [
                            {"const": "value1", "title": "First Option"},
                            {"const": "value2", "title": "Second Option"},
                            {"const": "value3", "title": "Third Option"}
                        ]
                    },
                    "legacyEnum": {
                        "type": "string",
                        "description": "Select one option (legacy)",
                        "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"]
                    },
                    "untitledMulti": {
                        "type": "array",
                        "description": "Select multiple options",
                        "minItems": 1,
                        "maxItems": 3,
                        "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
                    },
                    "titledMulti": {
                        "type": "array",
                        "description": "Select multiple options with titles",
                        "minItems": 1,
                        "maxItems": 3,
                        "items": {
                            "anyOf": [
                                {"const": "value1", "title": "First Choice"},
                                {"const": "value2", "title": "Second Choice"},
                                {"const": "value3", "title": "Third Choice"}
                            ]
                        }
                    }
                }
            }),
        )
        .await?;
    Ok(completed(&result))
}

/// Needs sampling; a client that did not declare it gets `-32021` (`server-stateless`).
#[task_tool(mode = "forbidden")]
async fn test_missing_capability(client: Client) -> Result<String, ToolError> {
    let answer = client.sample_text("Say hello", 10).await?;
    Ok(format!("LLM response: {answer}"))
}

/// Asks a question mid-call; on the stateless wire that is an `InputRequiredResult`, never a
/// request on the response stream (`server-stateless`).
#[task_tool(mode = "forbidden")]
async fn test_streaming_elicitation(client: Client) -> Result<String, ToolError> {
    let result = client
        .elicit(
            "What is your name?",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        )
        .await?;
    Ok(completed(&result))
}

/// Logs three lines; a stateless request without a log level must not see them.
#[task_tool(mode = "forbidden")]
async fn test_logging_tool(cx: TaskContext) -> &'static str {
    for message in ["starting", "working", "done"] {
        cx.info(message);
    }
    "Logging tool completed"
}

// ---- MRTR (`input-required-result-*`) ----

fn elicit_schema(field: &str, kind: &str) -> Value {
    json!({"type": "object", "properties": {field: {"type": kind}}, "required": [field]})
}

fn field(result: &ElicitResult, name: &str) -> String {
    match result.content.as_ref().and_then(|c| c.get(name)) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// Asks for a name, then greets.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_elicitation(client: Client) -> Result<String, ToolError> {
    let answer = client
        .elicit_keyed(
            "user_name",
            "What is your name?",
            elicit_schema("name", "string"),
        )
        .await?;
    Ok(format!("Hello, {}!", field(&answer, "name")))
}

/// Asks the client's model a question.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_sampling(client: Client) -> Result<String, ToolError> {
    let answer = client
        .sample_text("What is the capital of France?", 100)
        .await?;
    Ok(format!("The model says: {answer}"))
}

/// Asks for the client's roots.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_list_roots(client: Client) -> Result<String, ToolError> {
    let roots = client.list_roots().await?;
    Ok(format!("Client roots: {}", roots["roots"]))
}

/// Asks for a confirmation; the answer only counts with the signed request state.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_request_state(client: Client) -> Result<String, ToolError> {
    let answer = client
        .elicit("Please confirm", elicit_schema("ok", "boolean"))
        .await?;
    Ok(format!("state-ok: confirmed={}", field(&answer, "ok")))
}

/// Asks three things at once: a name, a model's greeting and the roots.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_multiple_inputs(client: Client) -> Result<String, ToolError> {
    let (name, greeting, roots) = tokio::join!(
        client.elicit("What is your name?", elicit_schema("name", "string")),
        client.sample_text("Generate a greeting", 50),
        client.list_roots(),
    );
    let (name, greeting, roots) = (name?, greeting?, roots?);
    Ok(format!(
        "name: {}, greeting: {greeting}, roots: {}",
        field(&name, "name"),
        roots["roots"]
    ))
}

/// Asks in two rounds: a name, then a colour.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_multi_round(client: Client) -> Result<String, ToolError> {
    let name = client
        .elicit(
            "Step 1: What is your name?",
            elicit_schema("name", "string"),
        )
        .await?;
    let color = client
        .elicit(
            "Step 2: What is your favorite color?",
            elicit_schema("color", "string"),
        )
        .await?;
    Ok(format!(
        "{} likes {}",
        field(&name, "name"),
        field(&color, "color")
    ))
}

/// Asks for a confirmation; a tampered request state is refused.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_tampered_state(client: Client) -> Result<String, ToolError> {
    let answer = client
        .elicit("Please confirm", elicit_schema("ok", "boolean"))
        .await?;
    Ok(format!("confirmed={}", field(&answer, "ok")))
}

/// Asks only for what the client declared it can answer.
#[task_tool(mode = "forbidden")]
async fn test_input_required_result_capabilities(client: Client) -> Result<String, ToolError> {
    let mut parts = Vec::new();
    if client.supports("elicitation") {
        let answer = client
            .elicit("What is your name?", elicit_schema("name", "string"))
            .await?;
        parts.push(format!("name: {}", field(&answer, "name")));
    }
    if client.supports("sampling") {
        let answer = client.sample_text("Say hello", 20).await?;
        parts.push(format!("model: {answer}"));
    }
    if parts.is_empty() {
        parts.push("the client declared no input capability".into());
    }
    Ok(parts.join(", "))
}

// ---- A question resumes the call ----

/// How many times `side_effect_then_ask` has done its side effect, in this process.
static SIDE_EFFECTS: AtomicU64 = AtomicU64::new(0);

/// The answer `side_effect_then_ask` asks for.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Confirm {
    /// Whether to go on.
    confirm: bool,
}

/// Does a side effect (counts it), then asks for a confirmation. A retry with the answer
/// resumes the call, so the side effect happens once per call.
#[task_tool(mode = "optional")]
async fn side_effect_then_ask(label: String, client: Client) -> Result<String, ToolError> {
    SIDE_EFFECTS.fetch_add(1, Ordering::SeqCst);
    let answer = client
        .elicit_as::<Confirm>(format!("Confirm {label}?"))
        .await?;
    let confirm = answer.is_some_and(|a| a.confirm);
    Ok(format!("confirmed {label}: {confirm}"))
}

/// How many times `side_effect_then_ask` has done its side effect.
#[task_tool(mode = "forbidden", read_only)]
async fn side_effect_count() -> String {
    SIDE_EFFECTS.load(Ordering::SeqCst).to_string()
}

// ---- Tools with hand-written input schemas ----

/// The tools whose input schemas `#[task_tool]` cannot express.
pub fn tools() -> Vec<Tool> {
    vec![json_schema_2020_12_tool(), annotated_echo()]
}

/// A tool whose input schema uses JSON Schema 2020-12 keywords (`json-schema-2020-12`).
fn json_schema_2020_12_tool() -> Tool {
    Tool::new("json_schema_2020_12_tool", |_, args| async move {
        Ok(CallToolResult::success(vec![Content::text(format!(
            "received {}",
            Value::Object(args)
        ))]))
    })
    .description("Tool with JSON Schema 2020-12 features")
    .input_schema(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    }))
}

/// Echoes `region`, which also travels in the `Mcp-Param-Region` header (SEP-2243). Its name
/// sorts first, so header probes that call "the first tool" with no arguments reach a tool
/// that answers at once.
fn annotated_echo() -> Tool {
    Tool::new("annotated_echo", |_, args| async move {
        let region = args.get("region").and_then(Value::as_str).unwrap_or("none");
        Ok(CallToolResult::success(vec![Content::text(format!(
            "region: {region}"
        ))]))
    })
    .description("Echoes the region, which is mirrored in the Mcp-Param-Region header.")
    .task_support(TaskSupport::Forbidden)
    .input_schema(json!({
        "type": "object",
        "properties": {
            "region": {"type": "string", "description": "A region name.", "x-mcp-header": "Region"}
        }
    }))
}
