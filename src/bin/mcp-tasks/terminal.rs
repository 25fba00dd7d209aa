//! Questions asked in the terminal: an elicitation's form field by field (with types, enums
//! and defaults), a sampling request as a reply typed for the model, roots as paths.

use dialoguer::{Confirm, Input, Select};
use indicatif::ProgressBar;
use mcp_tasks::client::{BoxFuture, InputHandler, Question};
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};

/// The progress bar on screen, if any, hidden while a question is asked.
pub type Bar = Arc<Mutex<Option<ProgressBar>>>;

/// Answers questions by asking the person at the terminal, one question at a time.
#[derive(Debug)]
pub struct TerminalHandler {
    bar: Bar,
    asking: Arc<Mutex<()>>,
}

impl TerminalHandler {
    /// Asks in the terminal, hiding `bar` while it does.
    pub fn new(bar: Bar) -> Self {
        Self {
            bar,
            asking: Arc::default(),
        }
    }
}

impl InputHandler for TerminalHandler {
    fn answer<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Result<Value, String>> {
        let bar = self.bar.clone();
        let asking = self.asking.clone();
        let question = question.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let _one_at_a_time = asking.lock().unwrap_or_else(|e| e.into_inner());
                let bar = bar.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match bar {
                    Some(bar) => bar.suspend(|| ask(&question)),
                    None => ask(&question),
                }
            })
            .await
            .map_err(|e| format!("the question could not be asked: {e}"))?
        })
    }
}

fn ask(q: &Question) -> Result<Value, String> {
    let who = q
        .task_id
        .as_deref()
        .map_or_else(String::new, |id| format!(" (task {id})"));
    match q.method.as_str() {
        "elicitation/create" => {
            eprintln!(
                "? {}{who}",
                q.message().unwrap_or("The server asks for input")
            );
            if q.params["mode"] == "url" {
                eprintln!("  open: {}", q.params["url"].as_str().unwrap_or_default());
                let done = Confirm::new()
                    .with_prompt("Done?")
                    .default(true)
                    .interact()
                    .map_err(|e| e.to_string());
                return Ok(match done {
                    Ok(true) => json!({"action": "accept"}),
                    Ok(false) => json!({"action": "decline"}),
                    Err(_) => json!({"action": "cancel"}),
                });
            }
            match form(q.requested_schema().unwrap_or(&Value::Null)) {
                Ok(content) => Ok(json!({"action": "accept", "content": content})),
                Err(_) => Ok(json!({"action": "cancel"})),
            }
        }
        "sampling/createMessage" => {
            eprintln!("? The server asks the model{who}:");
            for m in q.params["messages"].as_array().into_iter().flatten() {
                let text = m["content"]["text"]
                    .as_str()
                    .unwrap_or("(non-text content)");
                eprintln!("  {}: {text}", m["role"].as_str().unwrap_or("user"));
            }
            let reply: String = Input::new()
                .with_prompt("Reply as the model")
                .interact_text()
                .map_err(|e| format!("no reply: {e}"))?;
            Ok(
                json!({"role": "assistant", "content": {"type": "text", "text": reply},
                      "model": "human", "stopReason": "endTurn"}),
            )
        }
        "roots/list" => {
            let here = std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            let paths: String = Input::new()
                .with_prompt(format!("? Roots to share{who} (comma-separated paths)"))
                .default(here)
                .interact_text()
                .map_err(|e| format!("no roots: {e}"))?;
            let roots: Vec<Value> = paths
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| json!({"uri": format!("file://{p}")}))
                .collect();
            Ok(json!({ "roots": roots }))
        }
        other => Err(format!("this terminal does not answer {other}")),
    }
}

/// Asks each field of a flat form schema.
fn form(schema: &Value) -> Result<Value, dialoguer::Error> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut content = Map::new();
    for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
        let optional = !required.contains(&name.as_str());
        let mut label = prop["title"].as_str().unwrap_or(name).to_owned();
        if let Some(d) = prop["description"].as_str() {
            label = format!("{label} ({d})");
        }
        let choices = choices(prop);
        let value = if !choices.is_empty() {
            let labels: Vec<&str> = choices.iter().map(|(_, l)| l.as_str()).collect();
            let default = choices
                .iter()
                .position(|(v, _)| Some(v) == prop.get("default"))
                .unwrap_or(0);
            let i = Select::new()
                .with_prompt(&label)
                .items(&labels)
                .default(default)
                .interact()?;
            Some(choices[i].0.clone())
        } else {
            match prop["type"].as_str().unwrap_or("string") {
                "boolean" => Some(Value::Bool(
                    Confirm::new()
                        .with_prompt(&label)
                        .default(prop["default"].as_bool().unwrap_or(false))
                        .interact()?,
                )),
                t @ ("integer" | "number") => {
                    let mut input = Input::<String>::new()
                        .with_prompt(format!("{label} [{t}]"))
                        .allow_empty(optional)
                        .validate_with(move |s: &String| -> Result<(), String> {
                            let ok = s.is_empty()
                                || if t == "integer" {
                                    s.parse::<i64>().is_ok()
                                } else {
                                    s.parse::<f64>().is_ok()
                                };
                            if ok {
                                Ok(())
                            } else {
                                Err(format!(
                                    "type {} here",
                                    if t == "integer" {
                                        "an integer"
                                    } else {
                                        "a number"
                                    }
                                ))
                            }
                        });
                    if let Some(d) = prop.get("default").filter(|d| d.is_number()) {
                        input = input.default(d.to_string());
                    }
                    let s = input.interact_text()?;
                    (!s.is_empty()).then(|| serde_json::from_str(&s).unwrap_or(Value::String(s)))
                }
                _ => {
                    let mut input = Input::<String>::new()
                        .with_prompt(&label)
                        .allow_empty(optional);
                    if let Some(d) = prop["default"].as_str() {
                        input = input.default(d.to_owned());
                    }
                    let s = input.interact_text()?;
                    (!s.is_empty() || !optional).then_some(Value::String(s))
                }
            }
        };
        if let Some(v) = value {
            content.insert(name.clone(), v);
        }
    }
    Ok(Value::Object(content))
}

/// The allowed values of an enum field, with their labels (`enum` + `enumNames`, or
/// `oneOf` of `const` + `title`).
fn choices(prop: &Value) -> Vec<(Value, String)> {
    if let Some(values) = prop["enum"].as_array() {
        let names = prop["enumNames"].as_array();
        return values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
                (v.clone(), label)
            })
            .collect();
    }
    prop["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let v = o.get("const")?.clone();
            let label = o["title"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            Some((v, label))
        })
        .collect()
}

/// Ctrl-C, listened for from the moment this is made. Made before a task's progress is
/// drawn, so a Ctrl-C pressed after what the terminal shows always reaches the question
/// it asks, never the default action (which ends the process and leaves the task running
/// unannounced).
pub struct Interrupts {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
    #[cfg(windows)]
    signal: Option<tokio::signal::windows::CtrlC>,
}

impl Interrupts {
    /// Starts listening; where the platform refuses, Ctrl-C keeps its default action.
    pub fn listen() -> Self {
        #[cfg(unix)]
        let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
        #[cfg(windows)]
        let signal = tokio::signal::windows::ctrl_c().ok();
        Self { signal }
    }

    /// The next Ctrl-C.
    pub async fn next(&mut self) {
        if let Some(signal) = self.signal.as_mut()
            && signal.recv().await.is_some()
        {
            return;
        }
        std::future::pending().await
    }
}
