//! The era-neutral operations behind the methods: list the tools, find the tool, prompt or
//! resource a request names, complete an argument, get, cancel, answer and list tasks.
//!
//! A wire adapter decodes a request (see [`crate::wire::params`]), calls one of these and
//! encodes what it returns in its era's shape; the errors are [`Error`]s, which each era maps
//! to its codes. Nothing here knows a wire name of one era only.

use crate::error::Error;
use crate::model::JsonObject;
use crate::prompt::Prompt;
use crate::resource::Target;
use crate::server::Server;
use crate::store::TaskPage;
use crate::task::TaskRecord;
use crate::tool::Tool;
use crate::wire::params::{CompleteParams, CompleteReference, ListParams};
use serde_json::{Value, json};

/// What the server has beyond tools, which decides the capabilities it declares.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Offers {
    /// It has prompts.
    pub(crate) prompts: bool,
    /// It has resources or resource templates.
    pub(crate) resources: bool,
    /// It has something `completion/complete` can complete (prompts or templates).
    pub(crate) completions: bool,
}

/// What the server offers beyond tools.
pub(crate) fn offers(server: &Server) -> Offers {
    let inner = &server.inner;
    Offers {
        prompts: !inner.prompts.is_empty(),
        resources: !inner.resources.is_empty(),
        completions: !inner.prompts.is_empty() || inner.resources.has_templates(),
    }
}

/// One page of `tools/list`, plus the next cursor.
pub(crate) fn list_tools<'a>(
    server: &'a Server,
    params: &ListParams,
) -> Result<(Vec<&'a Tool>, Option<String>), Error> {
    let inner = &server.inner;
    page_of(
        inner.registry.iter(),
        inner.registry.len(),
        inner.page_size,
        params,
    )
}

/// One page of `prompts/list` (the same in both eras but for the cache hints the 2026-07-28
/// adapter adds).
pub(crate) fn list_prompts(server: &Server, params: &ListParams) -> Result<Value, Error> {
    let prompts = &server.inner.prompts;
    let (page, next) = page_of(
        prompts.iter(),
        prompts.len(),
        server.inner.page_size,
        params,
    )?;
    Ok(listed("prompts", page.iter().map(|p| p.describe()), next))
}

/// One page of `resources/list` (both eras; the 2026-07-28 adapter adds the cache hints).
pub(crate) fn list_resources(server: &Server, params: &ListParams) -> Result<Value, Error> {
    let (items, len) = server.inner.resources.fixed();
    let (page, next) = page_of(items, len, server.inner.page_size, params)?;
    Ok(listed("resources", page.iter().map(|r| r.describe()), next))
}

/// One page of `resources/templates/list`.
pub(crate) fn list_resource_templates(
    server: &Server,
    params: &ListParams,
) -> Result<Value, Error> {
    let (items, len) = server.inner.resources.templates();
    let (page, next) = page_of(items, len, server.inner.page_size, params)?;
    Ok(listed(
        "resourceTemplates",
        page.iter().map(|t| t.describe()),
        next,
    ))
}

/// The most values one `completion/complete` answer holds (the spec's limit).
const MAX_COMPLETIONS: usize = 100;

/// Answers `completion/complete` (the same in both eras but for `resultType`).
pub(crate) fn complete(server: &Server, params: &CompleteParams) -> Result<Value, Error> {
    let values = match &params.reference {
        CompleteReference::Prompt { name } => server
            .inner
            .prompts
            .get(name)
            .ok_or_else(|| Error::InvalidParams(format!("unknown prompt: {name}")))?
            .suggestions(&params.argument.name, &params.argument.value),
        CompleteReference::Resource { .. } => Vec::new(),
    };
    let total = values.len();
    let shown: Vec<String> = values.into_iter().take(MAX_COMPLETIONS).collect();
    Ok(json!({
        "completion": { "values": shown, "total": total, "hasMore": total > MAX_COMPLETIONS }
    }))
}

/// The tool `tools/call` names.
pub(crate) fn tool<'a>(server: &'a Server, name: &str) -> Result<&'a Tool, Error> {
    server
        .inner
        .registry
        .get(name)
        .ok_or_else(|| Error::UnknownTool(name.to_owned()))
}

/// The prompt `prompts/get` names, with its checked arguments.
pub(crate) fn prompt<'a>(
    server: &'a Server,
    name: &str,
    arguments: Option<JsonObject>,
) -> Result<(&'a Prompt, JsonObject), Error> {
    let prompt = server
        .inner
        .prompts
        .get(name)
        .ok_or_else(|| Error::InvalidParams(format!("unknown prompt: {name}")))?;
    Ok((prompt, prompt.check_arguments(arguments)?))
}

/// What serves the URI `resources/read` names.
pub(crate) fn resource<'a>(server: &'a Server, uri: &str) -> Result<Target<'a>, Error> {
    server
        .inner
        .resources
        .find(uri)
        .ok_or_else(|| Error::ResourceNotFound(uri.to_owned()))
}

/// The task `owner` may see.
pub(crate) async fn get_task(
    server: &Server,
    id: &str,
    owner: Option<&str>,
) -> Result<TaskRecord, Error> {
    server
        .inner
        .engine
        .get(id, owner)
        .await?
        .ok_or(Error::TaskNotFound)
}

/// Cancels a task: the task as it is afterwards, and whether this call cancelled it (`false`
/// when it had already ended).
pub(crate) async fn cancel_task(
    server: &Server,
    id: &str,
    owner: Option<&str>,
) -> Result<(TaskRecord, bool), Error> {
    server
        .inner
        .engine
        .cancel(id, owner)
        .await?
        .ok_or(Error::TaskNotFound)
}

/// Hands the client's answers to a task waiting for input.
pub(crate) async fn answer_task(
    server: &Server,
    id: &str,
    owner: Option<&str>,
    responses: &JsonObject,
) -> Result<TaskRecord, Error> {
    server
        .inner
        .engine
        .answer(id, owner, responses)
        .await?
        .ok_or(Error::TaskNotFound)
}

/// One page of the owner's tasks.
pub(crate) async fn list_tasks(
    server: &Server,
    owner: Option<&str>,
    params: &ListParams,
    limit: usize,
) -> Result<TaskPage, Error> {
    server
        .inner
        .engine
        .list(owner, params.cursor.as_deref(), limit)
        .await
}

/// A list result: `{ key: [items], nextCursor? }`.
fn listed(key: &str, items: impl Iterator<Item = Value>, next: Option<String>) -> Value {
    let mut result = JsonObject::new();
    result.insert(key.into(), Value::Array(items.collect()));
    if let Some(next) = next {
        result.insert("nextCursor".into(), next.into());
    }
    Value::Object(result)
}

/// A cursor for list pagination: the offset of the next page, opaque to clients.
pub(crate) fn encode_cursor(offset: usize) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("o:{offset}"))
}

/// Reads a cursor made by [`encode_cursor`].
pub(crate) fn decode_cursor(cursor: &str) -> Option<usize> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    std::str::from_utf8(&bytes)
        .ok()?
        .strip_prefix("o:")?
        .parse()
        .ok()
}

fn page_of<'a, T: 'a>(
    items: impl Iterator<Item = &'a T>,
    len: usize,
    page_size: usize,
    params: &ListParams,
) -> Result<(Vec<&'a T>, Option<String>), Error> {
    let start = match &params.cursor {
        None => 0,
        Some(c) => decode_cursor(c)
            .filter(|o| *o <= len)
            .ok_or_else(|| Error::InvalidParams(format!("invalid cursor {c:?}")))?,
    };
    let page: Vec<_> = items.skip(start).take(page_size).collect();
    let end = start + page.len();
    let next = (end < len).then(|| encode_cursor(end));
    Ok((page, next))
}
