//! Questions asked in the terminal: an elicitation's form field by field (with types, enums
//! and defaults), a sampling request as a reply typed for the model, roots as paths.

use dialoguer::{Confirm, Input, Select};
use indicatif::{ProgressBar, ProgressStyle};
use mcp_tasks::client::{BoxFuture, InputHandler, Question};
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex, MutexGuard};

/// The progress bar on screen, if any, hidden while a question is asked.
///
/// While a question waits for the person at the terminal, the bar is held hidden, and
/// what changes it meanwhile (progress, a status message) is kept, the latest of each, and
/// shown once the question is answered: the thread that reports progress never waits on
/// the person.
#[derive(Clone, Default)]
pub struct Bar(Arc<Mutex<Shown>>);

impl std::fmt::Debug for Bar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bar").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Shown {
    bar: Option<ProgressBar>,
    /// Questions being asked now.
    asking: usize,
    /// Changes not shown yet.
    pending: Changes,
}

/// The latest change of each kind not shown yet.
#[derive(Default)]
struct Changes {
    message: Option<String>,
    style: Option<ProgressStyle>,
    length: Option<u64>,
    position: Option<u64>,
}

impl Changes {
    fn show(self, bar: &ProgressBar) {
        if let Some(style) = self.style {
            bar.set_style(style);
        }
        if let Some(length) = self.length {
            bar.set_length(length);
        }
        if let Some(position) = self.position {
            bar.set_position(position);
        }
        if let Some(message) = self.message {
            bar.set_message(message);
        }
    }
}

impl Bar {
    /// Shows `bar` as the bar on screen.
    pub fn show(&self, bar: ProgressBar) {
        self.lock().bar = Some(bar);
    }

    /// The bar is gone from the screen.
    pub fn gone(&self) {
        let mut shown = self.lock();
        shown.bar = None;
        shown.pending = Changes::default();
    }

    /// Sets the bar's message.
    pub fn set_message(&self, message: impl Into<String>) {
        self.change(|c| c.message = Some(message.into()));
    }

    /// Gives the bar a length, in `style` when it had none.
    pub fn set_length(&self, length: u64, style: Option<ProgressStyle>) {
        self.change(|c| {
            c.length = Some(length);
            if style.is_some() {
                c.style = style;
            }
        });
    }

    /// Moves the bar to `position`.
    pub fn set_position(&self, position: u64) {
        self.change(|c| c.position = Some(position));
    }

    /// Runs `ask` (which asks the person at the terminal) with the bar hidden, then shows
    /// what changed meanwhile.
    pub fn asking<T>(&self, ask: impl FnOnce() -> T) -> T {
        let bar = {
            let mut shown = self.lock();
            shown.asking += 1;
            shown.bar.clone()
        };
        let answer = match bar {
            Some(bar) => bar.suspend(ask),
            None => ask(),
        };
        let mut shown = self.lock();
        shown.asking -= 1;
        shown.show_pending();
        answer
    }

    fn change(&self, change: impl FnOnce(&mut Changes)) {
        let mut shown = self.lock();
        change(&mut shown.pending);
        shown.show_pending();
    }

    fn lock(&self) -> MutexGuard<'_, Shown> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Shown {
    /// Shows what changed, unless a question hides the bar.
    fn show_pending(&mut self) {
        if self.asking == 0
            && let Some(bar) = &self.bar
        {
            std::mem::take(&mut self.pending).show(bar);
        }
    }
}

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
                bar.asking(|| ask(&question))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// While a question is asked (the bar's own lock held, as `suspend` holds it), a thread
    /// that reports progress goes on at once; what it reported shows once the question is
    /// answered. The wait for the reporter is bounded: it fails the test rather than hang.
    #[test]
    fn progress_reported_while_a_question_waits_goes_on_and_shows_after() {
        let bar = Bar::default();
        let shown = ProgressBar::hidden();
        bar.show(shown.clone());
        let (asked, question_on_screen) = mpsc::channel();
        let (answer, answered) = mpsc::channel::<()>();
        let asking = {
            let bar = bar.clone();
            std::thread::spawn(move || {
                bar.asking(|| {
                    asked.send(()).unwrap();
                    answered.recv().unwrap();
                })
            })
        };
        question_on_screen.recv().unwrap();
        let (reported, done) = mpsc::channel();
        {
            let bar = bar.clone();
            std::thread::spawn(move || {
                bar.set_length(10, Some(ProgressStyle::default_bar()));
                bar.set_position(3);
                bar.set_position(7);
                bar.set_message("newer");
                reported.send(()).unwrap();
            });
        }
        let went_on = done.recv_timeout(Duration::from_secs(30));
        answer.send(()).unwrap();
        asking.join().unwrap();
        went_on.expect("reporting progress waited for the question's answer");
        assert_eq!(
            shown.position(),
            7,
            "the latest position shows once answered"
        );
        assert_eq!(shown.length(), Some(10));
        assert_eq!(shown.message(), "newer");
    }
}
