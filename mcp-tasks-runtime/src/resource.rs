//! Resources: data a client can list and read (`resources/list`, `resources/templates/list`,
//! `resources/read`), either at a fixed URI ([`Resource`]) or at every URI a template matches
//! ([`ResourceTemplate`]).
//!
//! A resource's handler gets the same [`TaskContext`] a tool gets, so it can ask the client
//! questions: a server-to-client request in 2025-11-25, an `InputRequiredResult` round in
//! 2026-07-28 (the handler is suspended on the question and the client's retry resumes it;
//! see [`crate::mrtr`]).

use crate::context::{BoxFuture, TaskContext};
use crate::error::{Error, ToolError};
use crate::jsonrpc::ErrorObject;
use crate::model::{JsonObject, ResourceContents};
use crate::tool::ResumePolicy;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::future::Future;
use std::sync::Arc;

/// The function behind a resource or a template: context, the URI read and the template's
/// variables (empty for a fixed resource) in, contents out.
pub type ResourceHandler = Arc<
    dyn Fn(
            TaskContext,
            String,
            JsonObject,
        ) -> BoxFuture<'static, Result<Vec<ResourceContents>, ToolError>>
        + Send
        + Sync,
>;

/// A resource at a fixed URI: its metadata and its handler.
#[derive(Clone)]
pub struct Resource {
    pub(crate) uri: Arc<str>,
    name: String,
    title: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
    on_unresumable: ResumePolicy,
    pub(crate) handler: ResourceHandler,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("uri", &self.uri)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Resource {
    /// A resource at `uri` called `name`; `handler` gets the context and the URI.
    ///
    /// ```
    /// use mcp_tasks_runtime::model::ResourceContents;
    /// use mcp_tasks_runtime::resource::Resource;
    /// let readme = Resource::new("file:///readme", "readme", |_cx, uri| async move {
    ///     Ok(vec![ResourceContents {
    ///         uri,
    ///         mime_type: Some("text/plain".into()),
    ///         text: Some("Hello.".into()),
    ///         blob: None,
    ///     }])
    /// })
    /// .mime_type("text/plain");
    /// assert_eq!(readme.uri(), "file:///readme");
    /// ```
    pub fn new<F, Fut>(uri: impl Into<String>, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(TaskContext, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ToolError>> + Send + 'static,
    {
        Self {
            uri: uri.into().into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            on_unresumable: ResumePolicy::Fail,
            handler: Arc::new(move |cx, uri, _| Box::pin(handler(cx, uri))),
        }
    }

    /// The resource's URI.
    pub fn uri(&self) -> &str {
        &self.uri
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

    /// Sets the MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// Sets what a 2026-07-28 read does when the client answers the handler's question after
    /// the suspended read is gone (default [`ResumePolicy::Fail`]; [`ResumePolicy::Rerun`]
    /// runs the handler again from the start with the answers given so far).
    pub fn on_unresumable(mut self, policy: ResumePolicy) -> Self {
        self.on_unresumable = policy;
        self
    }

    /// The resource as `resources/list` shows it.
    pub(crate) fn describe(&self) -> Value {
        let mut v = json!({ "uri": &*self.uri, "name": self.name });
        if let Some(title) = &self.title {
            v["title"] = title.clone().into();
        }
        if let Some(d) = &self.description {
            v["description"] = d.clone().into();
        }
        if let Some(m) = &self.mime_type {
            v["mimeType"] = m.clone().into();
        }
        v
    }
}

/// One piece of a parsed URI template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Var(String),
}

/// A family of resources whose URIs match a template such as `file:///{dir}/{name}`.
///
/// Each `{var}` matches one non-empty path segment (no `/`); two variables must be separated
/// by literal text.
#[derive(Clone)]
pub struct ResourceTemplate {
    pub(crate) uri_template: Arc<str>,
    parts: Vec<Part>,
    name: String,
    title: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
    on_unresumable: ResumePolicy,
    pub(crate) handler: ResourceHandler,
}

impl std::fmt::Debug for ResourceTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceTemplate")
            .field("uri_template", &self.uri_template)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ResourceTemplate {
    /// A template called `name`; `handler` gets the context, the URI read and the matched
    /// variables (as strings). A malformed template fails when the server is built.
    ///
    /// ```
    /// use mcp_tasks_runtime::model::ResourceContents;
    /// use mcp_tasks_runtime::resource::ResourceTemplate;
    /// let user = ResourceTemplate::new("users://{id}/profile", "profile", |_cx, uri, vars| async move {
    ///     let id = vars["id"].as_str().unwrap_or_default().to_owned();
    ///     Ok(vec![ResourceContents { uri, mime_type: None, text: Some(id), blob: None }])
    /// });
    /// assert_eq!(user.matches("users://42/profile").unwrap()["id"], "42");
    /// assert!(user.matches("users://42/other").is_none());
    /// ```
    pub fn new<F, Fut>(uri_template: impl Into<String>, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(TaskContext, String, JsonObject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ToolError>> + Send + 'static,
    {
        let uri_template: String = uri_template.into();
        Self {
            parts: parse_template(&uri_template).unwrap_or_default(),
            uri_template: uri_template.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            on_unresumable: ResumePolicy::Fail,
            handler: Arc::new(move |cx, uri, vars| Box::pin(handler(cx, uri, vars))),
        }
    }

    /// The template's URI template.
    pub fn uri_template(&self) -> &str {
        &self.uri_template
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

    /// Sets the MIME type of the resources it stands for.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// Sets what a 2026-07-28 read does when the client answers the handler's question after
    /// the suspended read is gone (default [`ResumePolicy::Fail`]; [`ResumePolicy::Rerun`]
    /// runs the handler again from the start with the answers given so far).
    pub fn on_unresumable(mut self, policy: ResumePolicy) -> Self {
        self.on_unresumable = policy;
        self
    }

    /// The variables of `uri` when the template matches it.
    pub fn matches(&self, uri: &str) -> Option<JsonObject> {
        let mut vars = JsonObject::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        if self.parts.is_empty() {
            return None;
        }
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(l) => rest = rest.strip_prefix(l.as_str())?,
                Part::Var(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') {
                        return None;
                    }
                    vars.insert(name.clone(), value.into());
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }

    /// Checks the template's syntax.
    pub(crate) fn check(&self) -> Result<(), ResourceDefError> {
        parse_template(&self.uri_template)
            .map(|_| ())
            .ok_or_else(|| ResourceDefError::InvalidUriTemplate(self.uri_template.to_string()))
    }

    /// The template as `resources/templates/list` shows it.
    pub(crate) fn describe(&self) -> Value {
        let mut v = json!({ "uriTemplate": &*self.uri_template, "name": self.name });
        if let Some(title) = &self.title {
            v["title"] = title.clone().into();
        }
        if let Some(d) = &self.description {
            v["description"] = d.clone().into();
        }
        if let Some(m) = &self.mime_type {
            v["mimeType"] = m.clone().into();
        }
        v
    }
}

/// Splits a template into literals and `{var}`s; `None` when malformed (unbalanced braces,
/// an empty or invalid variable name, two adjacent variables).
fn parse_template(template: &str) -> Option<Vec<Part>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                parts.push(Part::Literal(rest.to_owned()));
                break;
            }
            Some(i) if rest.as_bytes()[i] == b'}' => return None,
            Some(i) => {
                if i > 0 {
                    parts.push(Part::Literal(rest[..i].to_owned()));
                } else if matches!(parts.last(), Some(Part::Var(_))) {
                    return None;
                }
                let close = rest[i..].find('}')? + i;
                let name = &rest[i + 1..close];
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return None;
                }
                parts.push(Part::Var(name.to_owned()));
                rest = &rest[close + 1..];
            }
        }
    }
    (!parts.is_empty()).then_some(parts)
}

/// What `resources/read` found for a URI: the handler and the template's variables.
pub(crate) struct Target<'a> {
    pub(crate) handler: &'a ResourceHandler,
    pub(crate) vars: JsonObject,
    pub(crate) on_unresumable: ResumePolicy,
}

/// Why a set of resources is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceDefError {
    /// Two resources share a URI.
    #[error("duplicate resource URI {0:?}")]
    DuplicateResource(String),
    /// Two resource templates share a URI template.
    #[error("duplicate resource template {0:?}")]
    DuplicateResourceTemplate(String),
    /// A resource template is malformed: unbalanced braces, an empty or non-`[A-Za-z0-9_]`
    /// variable name, or two variables with no literal text between them.
    #[error("invalid URI template {0:?}")]
    InvalidUriTemplate(String),
}

/// The server's resources: those at fixed URIs, by URI, and the templates, by template.
#[derive(Default)]
pub(crate) struct Resources {
    fixed: BTreeMap<Arc<str>, Resource>,
    templates: BTreeMap<Arc<str>, ResourceTemplate>,
}

impl Resources {
    /// Adds a resource; its URI must be new.
    pub(crate) fn insert(&mut self, resource: Resource) -> Result<(), ResourceDefError> {
        match self.fixed.entry(Arc::clone(&resource.uri)) {
            Entry::Occupied(e) => Err(ResourceDefError::DuplicateResource(e.key().to_string())),
            Entry::Vacant(e) => {
                e.insert(resource);
                Ok(())
            }
        }
    }

    /// Adds a template; it must be well-formed and new.
    pub(crate) fn insert_template(
        &mut self,
        template: ResourceTemplate,
    ) -> Result<(), ResourceDefError> {
        template.check()?;
        match self.templates.entry(Arc::clone(&template.uri_template)) {
            Entry::Occupied(e) => Err(ResourceDefError::DuplicateResourceTemplate(
                e.key().to_string(),
            )),
            Entry::Vacant(e) => {
                e.insert(template);
                Ok(())
            }
        }
    }

    /// `true` when there is neither a resource nor a template.
    pub(crate) fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.templates.is_empty()
    }

    /// `true` when there is a template (whose variables can be completed).
    pub(crate) fn has_templates(&self) -> bool {
        !self.templates.is_empty()
    }

    /// The resources at fixed URIs, by URI, and how many there are.
    pub(crate) fn fixed(&self) -> (impl Iterator<Item = &Resource>, usize) {
        (self.fixed.values(), self.fixed.len())
    }

    /// The templates, by template, and how many there are.
    pub(crate) fn templates(&self) -> (impl Iterator<Item = &ResourceTemplate>, usize) {
        (self.templates.values(), self.templates.len())
    }

    /// Finds what serves `uri`: a fixed resource first, then the first template that matches.
    pub(crate) fn find(&self, uri: &str) -> Option<Target<'_>> {
        if let Some(r) = self.fixed.get(uri) {
            return Some(Target {
                handler: &r.handler,
                vars: JsonObject::new(),
                on_unresumable: r.on_unresumable,
            });
        }
        self.templates.values().find_map(|t| {
            Some(Target {
                handler: &t.handler,
                vars: t.matches(uri)?,
                on_unresumable: t.on_unresumable,
            })
        })
    }
}

/// Runs a resource's handler; `Err` when it panicked.
pub(crate) async fn run(
    target: &Target<'_>,
    cx: TaskContext,
    uri: &str,
) -> Result<Result<Vec<ResourceContents>, ToolError>, ErrorObject> {
    crate::run::CatchUnwind::new((target.handler)(cx, uri.to_owned(), target.vars.clone()))
        .await
        .map_err(|panic| {
            tracing::error!(%uri, %panic, "resource handler panicked");
            Error::Internal(format!("resource {uri:?} panicked")).into()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(t: &str) -> ResourceTemplate {
        ResourceTemplate::new(t, "t", |_, _, _| async { Ok(Vec::new()) })
    }

    #[test]
    fn matches_single_segment_variables() {
        let t = template("test://template/{id}/data");
        assert_eq!(t.matches("test://template/123/data").unwrap()["id"], "123");
        assert!(t.matches("test://template//data").is_none());
        assert!(t.matches("test://template/1/2/data").is_none());
        assert!(t.matches("test://template/1/data/x").is_none());
        let t = template("db://{table}/{row}");
        let vars = t.matches("db://users/7").unwrap();
        assert_eq!(
            (vars["table"].as_str(), vars["row"].as_str()),
            (Some("users"), Some("7"))
        );
    }

    #[test]
    fn rejects_malformed_templates() {
        for bad in ["a://{x", "a://x}", "a://{}", "a://{a}{b}", "a://{a-b}"] {
            assert!(template(bad).check().is_err(), "{bad}");
        }
        assert!(template("a://{a}.{b}").check().is_ok());
    }
}
