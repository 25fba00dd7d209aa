//! Prompts: message templates a client can list and fill in (`prompts/list`, `prompts/get`).
//!
//! A prompt's handler gets the same [`TaskContext`] a tool gets, so it can ask the client
//! questions: a server-to-client request in 2025-11-25, an `InputRequiredResult` round in
//! 2026-07-28 (the handler is suspended on the question and the client's retry resumes it;
//! see [`crate::mrtr`]).

use crate::context::{BoxFuture, TaskContext};
use crate::error::{Error, ToolError, ToolErrorKind};
use crate::jsonrpc::ErrorObject;
use crate::model::{Content, JsonObject};
use crate::tool::ResumePolicy;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;

/// One argument a prompt takes (always a string on the wire).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptArgument {
    /// The argument's name.
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether `prompts/get` must supply it.
    #[serde(default)]
    pub required: bool,
}

/// One message of a filled-in prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptMessage {
    /// `"user"` or `"assistant"`.
    pub role: String,
    /// The message's content.
    pub content: Content,
}

impl PromptMessage {
    /// A message from the user.
    pub fn user(content: Content) -> Self {
        Self {
            role: "user".into(),
            content,
        }
    }

    /// A message from the assistant.
    pub fn assistant(content: Content) -> Self {
        Self {
            role: "assistant".into(),
            content,
        }
    }
}

/// A filled-in prompt: what `prompts/get` returns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GetPromptResult {
    /// A description of this filled-in prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages.
    pub messages: Vec<PromptMessage>,
}

/// The function behind a prompt: context and string arguments in, messages out.
pub type PromptHandler = Arc<
    dyn Fn(TaskContext, JsonObject) -> BoxFuture<'static, Result<GetPromptResult, ToolError>>
        + Send
        + Sync,
>;

/// A prompt: its metadata and its handler.
#[derive(Clone)]
pub struct Prompt {
    pub(crate) name: Arc<str>,
    title: Option<String>,
    description: Option<String>,
    arguments: Vec<PromptArgument>,
    completions: std::collections::BTreeMap<String, Vec<String>>,
    pub(crate) on_unresumable: ResumePolicy,
    pub(crate) handler: PromptHandler,
}

impl std::fmt::Debug for Prompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompt")
            .field("name", &self.name)
            .field("arguments", &self.arguments)
            .finish_non_exhaustive()
    }
}

impl Prompt {
    /// A prompt with this name and handler.
    ///
    /// ```
    /// use mcp_tasks_runtime::model::Content;
    /// use mcp_tasks_runtime::prompt::{GetPromptResult, Prompt, PromptMessage};
    /// let prompt = Prompt::new("review", |_cx, args| async move {
    ///     let file = args.get("file").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    ///     Ok(GetPromptResult {
    ///         description: None,
    ///         messages: vec![PromptMessage::user(Content::text(format!("Review {file}.")))],
    ///     })
    /// })
    /// .description("Ask for a code review.")
    /// .argument("file", "The file to review.", true);
    /// assert_eq!(prompt.name(), "review");
    /// ```
    pub fn new<F, Fut>(name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(TaskContext, JsonObject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, ToolError>> + Send + 'static,
    {
        Self {
            name: name.into().into(),
            title: None,
            description: None,
            arguments: Vec::new(),
            completions: std::collections::BTreeMap::new(),
            on_unresumable: ResumePolicy::Fail,
            handler: Arc::new(move |cx, args| Box::pin(handler(cx, args))),
        }
    }

    /// The prompt's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets a display title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Adds an argument.
    pub fn argument(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        required: bool,
    ) -> Self {
        self.arguments.push(PromptArgument {
            name: name.into(),
            description: Some(description.into()),
            required,
        });
        self
    }

    /// Sets the values `completion/complete` suggests for an argument (those that start with
    /// what the user typed, ignoring case, in the order given).
    pub fn complete_with<I, S>(mut self, argument: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.completions.insert(
            argument.into(),
            values.into_iter().map(Into::into).collect(),
        );
        self
    }

    /// Sets what a 2026-07-28 `prompts/get` does when the client answers the handler's
    /// question after the suspended call is gone (default [`ResumePolicy::Fail`];
    /// [`ResumePolicy::Rerun`] runs the handler again from the start with the answers given
    /// so far).
    pub fn on_unresumable(mut self, policy: ResumePolicy) -> Self {
        self.on_unresumable = policy;
        self
    }

    /// The suggestions for `argument` given what was typed so far.
    pub(crate) fn suggestions(&self, argument: &str, typed: &str) -> Vec<String> {
        let typed = typed.to_lowercase();
        self.completions
            .get(argument)
            .map(|values| {
                values
                    .iter()
                    .filter(|v| v.to_lowercase().starts_with(&typed))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The prompt as `prompts/list` shows it.
    pub(crate) fn describe(&self) -> Value {
        let mut v = json!({ "name": &*self.name });
        if let Some(title) = &self.title {
            v["title"] = title.clone().into();
        }
        if let Some(d) = &self.description {
            v["description"] = d.clone().into();
        }
        if !self.arguments.is_empty() {
            v["arguments"] = serde_json::to_value(&self.arguments).unwrap_or_default();
        }
        v
    }

    /// Checks `prompts/get` arguments: an object of strings with every required one present.
    pub(crate) fn check_arguments(&self, args: Option<JsonObject>) -> Result<JsonObject, Error> {
        let args = args.unwrap_or_default();
        if let Some((k, _)) = args.iter().find(|(_, v)| !v.is_string()) {
            return Err(Error::InvalidParams(format!(
                "prompt argument {k:?} must be a string"
            )));
        }
        if let Some(missing) = self
            .arguments
            .iter()
            .find(|a| a.required && !args.contains_key(&a.name))
        {
            return Err(Error::InvalidParams(format!(
                "prompt {:?} needs the argument {:?}",
                &*self.name, missing.name
            )));
        }
        Ok(args)
    }
}

/// Why a set of prompts is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PromptDefError {
    /// Two prompts share a name.
    #[error("duplicate prompt name {0:?}")]
    Duplicate(String),
}

/// The server's prompts, by name.
#[derive(Default)]
pub(crate) struct Prompts(std::collections::BTreeMap<Arc<str>, Prompt>);

impl Prompts {
    /// Adds a prompt; its name must be new.
    pub(crate) fn insert(&mut self, prompt: Prompt) -> Result<(), PromptDefError> {
        let name = Arc::clone(&prompt.name);
        match self.0.entry(name) {
            std::collections::btree_map::Entry::Occupied(e) => {
                Err(PromptDefError::Duplicate(e.key().to_string()))
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(prompt);
                Ok(())
            }
        }
    }

    /// The prompt with this name.
    pub(crate) fn get(&self, name: &str) -> Option<&Prompt> {
        self.0.get(name)
    }

    /// `true` when there is no prompt.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many prompts there are.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Every prompt, by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Prompt> {
        self.0.values()
    }
}

/// How a prompt or resource handler's error is answered.
pub(crate) fn prompt_error(error: ToolError) -> ErrorObject {
    let message = error.to_string();
    match error.kind {
        ToolErrorKind::Protocol(p) => Error::Protocol(p).into(),
        ToolErrorKind::InvalidArguments(m) => Error::InvalidParams(m).into(),
        ToolErrorKind::MissingCapability(cap) => Error::MissingCapability {
            required: json!({ cap: {} }),
        }
        .into(),
        ToolErrorKind::Cancelled => Error::Cancelled.into(),
        ToolErrorKind::Failed(_) => Error::Internal(message).into(),
    }
}

/// Runs a prompt's handler; `Err` when it panicked.
pub(crate) async fn run(
    prompt: &Prompt,
    cx: TaskContext,
    args: JsonObject,
) -> Result<Result<GetPromptResult, ToolError>, ErrorObject> {
    crate::run::CatchUnwind::new((prompt.handler)(cx, args))
        .await
        .map_err(|panic| {
            tracing::error!(prompt = %prompt.name, %panic, "prompt panicked");
            Error::Internal(format!("prompt {:?} panicked", &*prompt.name)).into()
        })
}
