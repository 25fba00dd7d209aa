//! The era-neutral data model: content blocks, tool results, tool metadata and the
//! requests a tool can make of the client.
//!
//! Field names here are the ones both protocol eras share. What differs between the eras
//! (`ttl` or `ttlMs`, nested or flat task results, `resultType`) lives in the wire adapters.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A JSON object.
pub type JsonObject = serde_json::Map<String, Value>;

/// Optional hints on a content block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentAnnotations {
    /// Who the content is for: `"user"`, `"assistant"` or both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<String>>,
    /// Importance from 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    /// When the content was last modified (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

/// The contents of an embedded resource: text or a base64 blob.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    /// The resource's URI.
    pub uri: String,
    /// Its MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Base64-encoded binary contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

/// One block of a tool result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// An image.
    Image {
        /// Base64-encoded image data.
        data: String,
        /// The image's MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// Audio.
    Audio {
        /// Base64-encoded audio data.
        data: String,
        /// The audio's MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// Its name.
        name: String,
        /// A description.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Its MIME type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
    /// An embedded resource.
    Resource {
        /// The resource's contents.
        resource: ResourceContents,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<ContentAnnotations>,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text {
            text: text.into(),
            annotations: None,
        }
    }

    /// An image block from base64 data.
    pub fn image(data_base64: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Image {
            data: data_base64.into(),
            mime_type: mime_type.into(),
            annotations: None,
        }
    }

    /// An audio block from base64 data.
    pub fn audio(data_base64: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Audio {
            data: data_base64.into(),
            mime_type: mime_type.into(),
            annotations: None,
        }
    }

    /// A link to a resource.
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            description: None,
            mime_type: None,
            annotations: None,
        }
    }

    /// An embedded text resource.
    pub fn embedded_text(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self::Resource {
            resource: ResourceContents {
                uri: uri.into(),
                mime_type: Some(mime_type.into()),
                text: Some(text.into()),
                blob: None,
            },
            annotations: None,
        }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text, .. } => Some(text),
            _ => None,
        }
    }
}

/// The result of a tool call, the same in both eras.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// The content blocks (may be empty).
    pub content: Vec<Content>,
    /// Structured output, conforming to the tool's output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// `true` when the tool failed; the content then says why.
    #[serde(default)]
    pub is_error: bool,
}

impl CallToolResult {
    /// A successful result with the given content.
    pub fn success(content: Vec<Content>) -> Self {
        Self {
            content,
            structured_content: None,
            is_error: false,
        }
    }

    /// A tool error (`isError: true`) with one text block.
    pub fn error_text(message: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(message)],
            structured_content: None,
            is_error: true,
        }
    }

    /// The text of the first text block, if any.
    pub fn first_text(&self) -> Option<&str> {
        self.content.iter().find_map(Content::as_text)
    }
}

/// Whether a tool runs as a task: the spec's `execution.taskSupport` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// Never a task.
    Forbidden,
    /// A task when the client opts in, a plain call otherwise.
    #[default]
    Optional,
    /// Always a task; clients that cannot do tasks get an error.
    Required,
}

impl TaskSupport {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forbidden => "forbidden",
            Self::Optional => "optional",
            Self::Required => "required",
        }
    }
}

/// Hints about a tool's behaviour (untrusted by clients).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling the tool twice with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool talks to an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// `true` when no hint is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Severity of a log message, as in RFC 5424.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// A request the server makes of the client on a tool's behalf: elicitation, sampling or roots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: String,
    /// The request's params.
    #[serde(default)]
    pub params: Value,
    /// The key the request is filed under in `inputRequests`; `None` lets the runtime number
    /// it (`elicit-1`, `sample-2`, ...). Never sent on the wire.
    #[serde(skip)]
    pub key: Option<String>,
}

impl InputRequest {
    /// The client capability this request needs (`elicitation`, `sampling` or `roots`).
    pub fn capability(&self) -> &'static str {
        match self.method.as_str() {
            "elicitation/create" => "elicitation",
            "sampling/createMessage" => "sampling",
            _ => "roots",
        }
    }
}

/// The client's answer to an elicitation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    /// `accept`, `decline` or `cancel`.
    pub action: ElicitAction,
    /// The submitted form, when accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<JsonObject>,
}

/// What the user did with an elicitation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// The user submitted the form.
    Accept,
    /// The user said no.
    Decline,
    /// The user dismissed the request.
    Cancel,
}

/// The key of the `n`th question a call asks, when the tool names none: `elicit-1`,
/// `sample-2`, `roots-3`.
pub(crate) fn input_key(method: &str, n: usize) -> String {
    let kind = match method {
        "elicitation/create" => "elicit",
        "sampling/createMessage" => "sample",
        _ => "roots",
    };
    format!("{kind}-{n}")
}

/// The stored form of a client's error answer to a question, which the waiting tool turns
/// back into an error.
pub(crate) const ANSWER_ERROR: &str = "io.mcp-tasks/answerError";

/// A client's error answer to a question, in the form a task stores.
pub(crate) fn error_answer(message: &str) -> Value {
    serde_json::json!({ ANSWER_ERROR: message })
}
