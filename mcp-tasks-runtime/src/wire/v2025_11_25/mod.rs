//! The stateful wire of MCP 2025-11-25 (and the older stateful revisions it can negotiate).
//!
//! The era is fixed at `initialize`; client capabilities come from there too. Server-to-client
//! requests (elicitation, sampling, roots) travel on the connection.
//!
//! The older revisions (2025-06-18, 2025-03-26, 2024-11-05) are served without the Tasks
//! utility: no `tasks` capability, no `execution` on tools, no `params.task`, no `tasks/*`.
//! What else sets them apart is the transport's: 2024-11-05 had the HTTP+SSE transport,
//! which this server does not offer (a client of it that speaks Streamable HTTP or stdio is
//! served), and SSE priming events came with 2025-11-25 (`primes_streams`).

mod asker;
mod direct;
mod shapes;
mod tasks;

use crate::error::Error;
use crate::jsonrpc::{self, ErrorObject, Payload, Request};
use crate::ops;
use crate::ops::ListParams;
use crate::server::Server;
use crate::session::{Connection, Era, Sink, StatefulState};
use crate::sync::LockExt;
use crate::task::TaskRecord;
use crate::wire::params::{SetLevelParams, UriParams, decode};
use direct::{DirectCall, prompts_get, resources_read, tools_call};
use serde::Serialize;
use serde_json::{Value, json};
use shapes::{InitializeParams, Task};
use std::sync::Arc;
use tasks::tasks;

/// The `_meta` key that ties a message to a task.
pub(crate) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How many tasks a `tasks/list` page holds.
const TASK_PAGE: usize = 100;

/// The newest stateful revision.
pub const LATEST: &str = "2025-11-25";
/// Every stateful revision the server accepts, newest first.
pub const SUPPORTED: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// `true` when a session of `version` gets an SSE priming event (an id and empty data) at the
/// start of each stream: from 2025-11-25 on. Clients of the older revisions read the empty
/// data as a message and report a parse error, so the official SDK servers do not send it
/// to them either.
#[cfg(feature = "http")]
pub(crate) fn primes_streams(version: &str) -> bool {
    // Revisions are dates, so they order as text.
    version >= LATEST
}

/// This era's JSON-RPC error for a server error: the neutral one, but for the conventional
/// `-32002` of an unknown resource.
fn wire_error(error: Error) -> ErrorObject {
    let unknown_resource = matches!(error, Error::ResourceNotFound(_));
    let mut object = ErrorObject::from(error);
    if unknown_resource {
        object.code = jsonrpc::RESOURCE_NOT_FOUND;
    }
    object
}

/// Serialises a result; these types always serialise.
fn to_value(result: impl Serialize) -> Value {
    serde_json::to_value(result).unwrap_or_default()
}

/// Answers `initialize` and fixes the connection's era.
pub(crate) fn initialize(
    server: &Server,
    conn: &Arc<Connection>,
    mut request: Request,
) -> Result<Value, ErrorObject> {
    let params: InitializeParams = decode(&mut request)?;
    let version = SUPPORTED
        .iter()
        .copied()
        .find(|v| *v == params.protocol_version)
        .unwrap_or(LATEST);
    let client_capabilities = Arc::new(Value::Object(params.capabilities.unwrap_or_default()));
    let decided = conn.decide(Era::Stateful(StatefulState {
        version,
        client_capabilities,
    }));
    if !decided {
        return Err(Error::InvalidRequest("the session is already initialized".into()).into());
    }
    let inner = &server.inner;
    let offers = ops::offers(server);
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": { "listChanged": false },
            "logging": {},
        },
        "serverInfo": inner.info_value,
    });
    if offers.prompts {
        result["capabilities"]["prompts"] = json!({ "listChanged": false });
    }
    if offers.completions {
        result["capabilities"]["completions"] = json!({});
    }
    if offers.resources {
        result["capabilities"]["resources"] = json!({ "subscribe": true, "listChanged": false });
    }
    if version == LATEST {
        result["capabilities"]["tasks"] = json!({
            "list": {},
            "cancel": {},
            "requests": { "tools": { "call": {} } },
        });
    }
    if let Some(instructions) = &inner.instructions {
        result["instructions"] = instructions.clone().into();
    }
    Ok(result)
}

/// Answers one request of an initialized session of this era; `None` when it must not be
/// answered (it was cancelled).
pub(crate) async fn dispatch(
    server: &Server,
    conn: &Arc<Connection>,
    state: &StatefulState,
    request: Request,
    sink: Sink,
) -> Option<Result<Payload, ErrorObject>> {
    let mut request = request;
    let direct_call = |id, sink| DirectCall {
        server,
        conn,
        state,
        id,
        sink,
    };
    let result = match request.method.as_str() {
        "initialize" => {
            Err(Error::InvalidRequest("the session is already initialized".into()).into())
        }
        "ping" => Ok(json!({})),
        "tools/list" => tools_list(server, conn, state, &mut request),
        "logging/setLevel" => set_level(conn, &mut request),
        "tools/call" => {
            return tools_call(direct_call(request.id.clone(), sink), request).await;
        }
        "prompts/list" => prompts_list(server, &mut request),
        "completion/complete" => decode(&mut request)
            .and_then(|p| ops::complete(server, &p))
            .map_err(Into::into),
        "prompts/get" => {
            return prompts_get(direct_call(request.id.clone(), sink), request)
                .await
                .map(|r| r.map(Payload::Value));
        }
        "resources/list" => resources_list(server, &mut request, ops::list_resources),
        "resources/templates/list" => {
            resources_list(server, &mut request, ops::list_resource_templates)
        }
        "resources/read" => {
            return resources_read(direct_call(request.id.clone(), sink), request)
                .await
                .map(|r| r.map(Payload::Value));
        }
        "resources/subscribe" | "resources/unsubscribe" => subscribe(conn, &mut request),
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" if state.version == LATEST => {
            return tasks(server, conn, request, sink).await;
        }
        other => Err(Error::MethodNotFound(other.to_owned()).into()),
    };
    Some(result.map(Payload::Value))
}

/// The owner of the tasks a connection creates: its principal, else the session itself.
fn owner(conn: &Connection) -> &str {
    conn.task_owner(true).unwrap_or_default()
}

/// A task as this era shows it.
pub(crate) fn task_json(rec: &TaskRecord) -> Value {
    to_value(Task::of(rec))
}

fn prompts_list(server: &Server, request: &mut Request) -> Result<Value, ErrorObject> {
    Ok(ops::list_prompts(server, &decode(request)?)?)
}

/// `resources/list` or `resources/templates/list`, by the listing function given.
fn resources_list(
    server: &Server,
    request: &mut Request,
    list: fn(&Server, &ListParams) -> Result<Value, Error>,
) -> Result<Value, ErrorObject> {
    Ok(list(server, &decode(request)?)?)
}

/// `resources/subscribe` and `resources/unsubscribe`: remembered per connection.
fn subscribe(conn: &Connection, request: &mut Request) -> Result<Value, ErrorObject> {
    let uri = decode::<UriParams>(request)?.uri;
    let mut subscriptions = conn.subscriptions.locked();
    if request.method == "resources/subscribe" {
        subscriptions.insert(uri);
    } else {
        subscriptions.remove(&uri);
    }
    Ok(json!({}))
}

fn tools_list(
    server: &Server,
    conn: &Connection,
    state: &StatefulState,
    request: &mut Request,
) -> Result<Value, ErrorObject> {
    let params: ListParams = decode(request)?;
    let (page, next) = ops::list_tools(server, &params, conn.caller().as_deref())?;
    let tools: Vec<Value> = page
        .into_iter()
        .map(|t| {
            let mut tool = t.describe();
            if state.version == LATEST {
                tool.insert(
                    "execution".into(),
                    json!({ "taskSupport": t.task_support.as_str() }),
                );
            }
            Value::Object(tool)
        })
        .collect();
    let mut result = json!({ "tools": tools });
    if let Some(next) = next {
        result["nextCursor"] = next.into();
    }
    Ok(result)
}

fn set_level(conn: &Connection, request: &mut Request) -> Result<Value, ErrorObject> {
    let params: SetLevelParams = decode(request)?;
    conn.set_log_level(params.level);
    Ok(json!({}))
}
