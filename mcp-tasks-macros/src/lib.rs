//! The `#[task_tool]` attribute of the `mcp-tasks` crate.
//!
//! Use it as `mcp_tasks::task_tool` (it is also in `mcp_tasks::prelude`); this crate is an
//! implementation detail of `mcp-tasks` and its version is pinned by it. The manual is the
//! documentation of [`task_tool`](macro@task_tool), best read where `mcp-tasks` re-exports it
//! (`cargo doc -p mcp-tasks --all-features --open`).

mod args;
mod ast;
mod duration;
mod errors;
mod expand;
mod fallback;
mod valid;

use proc_macro::TokenStream;

/// Turns an `async fn` into an MCP tool whose calls can run as durable background tasks.
///
/// The function stays exactly as written, so it can still be called from unit tests. Next
/// to it the attribute generates:
///
/// - an input type that derives `Deserialize` and `JsonSchema` from the function's ordinary
///   parameters; its schema is the tool's `inputSchema`;
/// - a handler that reads the call's arguments into that type, builds the injected
///   parameters ([`Progress`], [`TaskContext`], ...), awaits the function and turns its return
///   value into the tool's result;
/// - a registration that [`Server::from_registry`] finds at startup, wherever the function
///   is in the crate.
///
/// # Example
///
/// ```
/// use mcp_tasks::prelude::*;
///
/// /// Render a report of `pages` pages.
/// ///
/// /// The model reads this doc comment as the tool's description.
/// #[task_tool(mode = "optional", poll_interval = "2s", read_only)]
/// async fn render_report(
///     #[arg(description = "How many pages to render.")] pages: u32,
///     #[arg(default = String::from("pdf"))] format: String,
///     title: Option<String>,
///     progress: Progress,
///     cancel: CancellationToken,
/// ) -> Result<String, ToolError> {
///     for page in 1..=pages {
///         if cancel.is_cancelled() {
///             return Err(ToolError::cancelled());
///         }
///         progress.report(page as f64, Some(pages as f64));
///     }
///     let title = title.unwrap_or_else(|| "report".into());
///     Ok(format!("{title}.{format}: {pages} pages"))
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     // The function is untouched: call it directly in unit tests.
///     let progress = Progress::noop();
///     let text = render_report(2, "pdf".into(), None, progress, CancellationToken::new())
///         .await
///         .unwrap();
///     assert_eq!(text, "report.pdf: 2 pages");
///
///     // Every `#[task_tool]` of the binary is registered.
///     let server = Server::from_registry()?;
///     assert_eq!(server.tools().get("render_report").unwrap().mode(), TaskSupport::Optional);
///     # if false {
///     server.serve_stdio().await?;
///     # }
///     Ok(())
/// }
/// ```
///
/// The input schema of `render_report` has the properties `pages` (required, with its
/// description), `format` (optional, default `"pdf"`) and `title` (optional), and refuses any
/// other property.
///
/// Serving the tools (stdio, HTTP, task stores, mounting in an axum app) and reading what they
/// log and count are chapters of the crate page: [Serve it] and [Logs and metrics].
///
/// # Arguments
///
/// | argument | value | default | sets |
/// | --- | --- | --- | --- |
/// | `mode` | `"forbidden"`, `"optional"` or `"required"` | `"optional"` | the tool's `taskSupport` ([`TaskSupport`]) |
/// | `poll_interval` | a duration | `"1s"` | the poll interval suggested to clients of this tool's tasks |
/// | `ttl` | a duration, or `"none"` | `"1h"` | how long a task is kept after its creation; `"none"`: until deleted |
/// | `name` | a string of 1 to 64 `A-Z a-z 0-9 _ - .` | the function's name | the tool's name |
/// | `title` | a string | none | the tool's display title |
/// | `description` | a string | the function's doc comment | the description the model reads |
/// | `read_only` | a flag, or `= true` / `= false` | unset | `annotations.readOnlyHint` |
/// | `destructive` | a flag, or `= true` / `= false` | unset | `annotations.destructiveHint` |
/// | `idempotent` | a flag, or `= true` / `= false` | unset | `annotations.idempotentHint` |
/// | `open_world` | a flag, or `= true` / `= false` | unset | `annotations.openWorldHint` |
/// | `on_restart` | `"fail"` or `"rerun"` | `"fail"` | what becomes of a task that was running when the server stopped |
/// | `on_unresumable` | `"fail"` or `"rerun"` | `"fail"` | what a 2026-07-28 synchronous call does when the client answers a question after the suspended call is gone ([below](#questions-to-the-client-and-on_unresumable)) |
/// | `prelude` | a flag, or `= true` / `= false` | unset | the call runs inline until it awaits [`TaskContext::detach`]; questions asked before that are answered in synchronous rounds (2026-07-28) |
/// | `unique` | a flag (all arguments), or a list of argument names, `= ["index", "tenant"]` | unset | a call equal to an unfinished task of this tool and owner, in the arguments named, gets that task back instead of starting another ([`Unique`], [below](#unique-unique_window-one-task-per-set-of-arguments)) |
/// | `unique_window` | a duration | none | with `unique`: equal calls in the same window (counted from the Unix epoch) get the same task, finished or not |
/// | `scopes` | a list of OAuth scopes, `= ["reports:write"]` | none (anyone may call) | the scopes a caller's [`Principal`] must hold to call the tool and, later, to read, answer or cancel its tasks ([below](#scopes-who-may-call)) |
/// | `crate` | a path | `::mcp_tasks` | where the generated code finds the runtime |
///
/// Every value is checked while compiling: a typo in a mode, a duration or a name is an
/// error on that literal, not a panic at startup.
///
/// ## `mode`, `poll_interval`, `ttl`, `on_restart`: how calls run as tasks
///
/// `mode` is the spec's `taskSupport`: `"forbidden"` tools always answer directly,
/// `"optional"` tools become tasks when the client asks for one, and `"required"` tools are
/// always tasks (clients that cannot do tasks get an error).
///
/// A duration is a whole number followed by a unit: `ms`, `s`, `m` or `h` (`"500ms"`,
/// `"2s"`, `"1_500ms"`, `"12h"`). It must be greater than zero.
///
/// With `on_restart = "fail"`, a task still running when the server stopped ends `failed`.
/// With `"rerun"`, it runs again from its stored arguments under the same task id, which is
/// only safe for a tool that is also declared `idempotent`, or one made of durable steps (a
/// [`Steps`] parameter, [below](#durable-steps-steps)), whose finished steps are not done
/// again. Either is checked while compiling.
///
/// ```
/// # use mcp_tasks::prelude::*;
/// /// Reindex the search database.
/// #[task_tool(
///     mode = "required",
///     poll_interval = "5s",
///     ttl = "24h",
///     idempotent,
///     on_restart = "rerun",
/// )]
/// async fn reindex(progress: Progress) {
///     progress.message("reindexing");
/// }
///
/// /// Keep the last answer forever.
/// #[task_tool(ttl = "none", mode = "forbidden")]
/// async fn answer() -> &'static str {
///     "42"
/// }
/// # fn main() {}
/// ```
///
/// ## Questions to the client, and `on_unresumable`
///
/// A tool asks the user or the client's model something with [`Client`] (`elicit`,
/// `elicit_as`, `sample_text`, `list_roots`, ...) and awaits the answer. What the client sees
/// depends on how the tool was called; the tool's code is the same in every case:
///
/// | the call | how the question travels | what the tool sees |
/// | --- | --- | --- |
/// | a task (either era) | the task parks in `input_required`; the question is sent as a request tagged with the task (2025-11-25) or listed in `tasks/get` and answered with `tasks/update` (2026-07-28) | the `await` returns the answer |
/// | a synchronous call, 2025-11-25 | a server-to-client request on the same connection, while the call waits | the `await` returns the answer |
/// | a synchronous call, 2026-07-28 (no tasks extension, or `mode = "forbidden"`) | the call is suspended on the question and the request is answered with an `InputRequiredResult`: every open question in `inputRequests`, and a signed `requestState`. The client retries the call with `inputResponses` and that `requestState` | the `await` returns the answer: the same call continues from the question, and nothing before it runs again |
///
/// The third case holds for questions asked one after the other (each retry is answered with
/// the next `InputRequiredResult`, with a new `requestState`) and for questions asked at once
/// (`tokio::join!`: all of them are in one `inputRequests`; a retry that answers only some of
/// them is answered with the rest). Answers to keys that are not open are ignored. While it
/// waits, the suspended call does not run. A `requestState` resumes its call once: replaying
/// it, or sending the state of an earlier round, is a `-32602` error, and a tampered or
/// foreign state is refused the same way.
///
/// Resuming is impossible when the suspended call is gone: the client took longer than
/// [`ServerBuilder::parked_call_timeout`] (five minutes by default; the call is then
/// cancelled as a cancelled request is), the server restarted, or the retry reached another
/// server process. Then `on_unresumable` decides:
///
/// - `"fail"` (the default): the retry gets a `-32602` error saying the interaction expired
///   and must start over without `requestState`. Nothing the tool did runs twice.
/// - `"rerun"`: the tool runs again from the start and finds every answer given so far
///   (`requestState` carries them). Whatever the tool did before its first question happens
///   again, so this needs `idempotent`, which is checked while compiling.
///
/// The server keeps at most [`ServerBuilder::max_parked_calls`] suspended calls. A call that
/// asks when that many are waiting is cancelled at once: with `"fail"` the request gets
/// `-32000` (server busy); with `"rerun"` it gets its `InputRequiredResult` as usual and the
/// retry runs the tool again.
///
/// A `prompts/get` or `resources/read` handler that asks questions is suspended and resumed
/// the same way (`Prompt::on_unresumable`, `Resource::on_unresumable`). A tool with `prelude`
/// is suspended the same way until it awaits `detach()`, and then goes on as a task.
///
/// ```
/// use mcp_tasks::prelude::*;
/// use serde_json::{Value, json};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// static IMPORTED: AtomicU32 = AtomicU32::new(0);
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Confirm {
///     confirm: bool,
/// }
///
/// /// Import the first half of the items, then ask before importing the rest.
/// #[task_tool(mode = "optional")]
/// async fn bulk_import(client: Client) -> Result<String, ToolError> {
///     IMPORTED.fetch_add(1, Ordering::SeqCst); // the first half
///     let answer = client.elicit_as::<Confirm>("Import the rest too?").await?;
///     Ok(format!("rest imported: {}", answer.is_some_and(|a| a.confirm)))
/// }
///
/// /// Look something up; running it twice changes nothing.
/// #[task_tool(idempotent, on_unresumable = "rerun")]
/// async fn lookup(client: Client) -> Result<String, ToolError> {
///     let answer = client.elicit_as::<Confirm>("Look it up?").await?;
///     Ok(format!("looked up: {}", answer.is_some_and(|a| a.confirm)))
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let server = Server::from_registry()?;
///     let (session, _) = server.session();
///     // A 2026-07-28 client without the tasks extension.
///     let call = |extra: Value| {
///         let mut params = json!({"name": "bulk_import", "_meta": {
///             "io.modelcontextprotocol/protocolVersion": "2026-07-28",
///             "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
///         }});
///         params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
///         json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string()
///     };
///     let reply = session.handle_text(&call(json!({}))).await.unwrap();
///     let first: Value = serde_json::from_str(&reply)?;
///     assert_eq!(first["result"]["resultType"], "input_required");
///     let state = first["result"]["requestState"].clone();
///     let answer = json!({"elicit-1": {"action": "accept", "content": {"confirm": true}}});
///
///     let retry = call(json!({"requestState": state, "inputResponses": answer}));
///     let done: Value = serde_json::from_str(&session.handle_text(&retry).await.unwrap())?;
///     assert_eq!(done["result"]["content"][0]["text"], "rest imported: true");
///     assert_eq!(IMPORTED.load(Ordering::SeqCst), 1, "resumed, not run again");
///
///     // The same state again resumes nothing.
///     let replay: Value = serde_json::from_str(&session.handle_text(&retry).await.unwrap())?;
///     assert_eq!(replay["error"]["code"], -32602);
///     assert_eq!(IMPORTED.load(Ordering::SeqCst), 1);
///     Ok(())
/// }
/// ```
///
/// ## `unique`, `unique_window`: one task per set of arguments
///
/// A unique tool does not start a second task for a call equal to one of its unfinished
/// tasks (of the same owner): the call gets that task back. `unique` alone compares every
/// argument; `unique = ["index"]` only those named, which must be arguments of the tool (an
/// argument left out of a call counts as `null`). With `unique_window = "1h"`, calls in the
/// same hour get the same task even once it has finished: at most one task an hour per set
/// of equal arguments. Only tasks can be handed back, so a unique tool cannot be
/// `mode = "forbidden"`. The names are checked while compiling; with an `#[input]` type,
/// whose fields the attribute cannot see, when the server is built.
///
/// ```
/// # use mcp_tasks::prelude::*;
/// /// Rebuild one search index; a rebuild already under way is joined, not doubled.
/// #[task_tool(mode = "optional", unique = ["index"], unique_window = "10m")]
/// async fn rebuild_index(index: String, verbose: Option<bool>) -> String {
///     format!("rebuilt {index} (verbose: {})", verbose.unwrap_or(false))
/// }
/// # fn main() {}
/// ```
///
/// ## `scopes`: who may call
///
/// A tool with `scopes` is called only by callers whose [`Principal`] (the one the HTTP
/// transport's authenticator found, such as an OAuth resource server's validated access
/// token) holds every scope named. A call without them is refused with a JSON-RPC error
/// (`-32003`, `data.requiredScopes`) and, over HTTP, a `403` whose
/// `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"` names what to ask for.
/// The check is made again on every later `tasks/get`, `tasks/result`, `tasks/update` and
/// `tasks/cancel` of the tool's tasks, with the credentials of that request: a token that
/// lost a scope can no longer read, answer or cancel the task. Anonymous callers hold no
/// scope (over stdio, a tool with scopes cannot be called). `ServerBuilder::hide_tools_out_of_scope`
/// also leaves the tools a caller may not call out of its `tools/list`.
///
/// Each scope is a string literal, non-empty and without whitespace, named once: anything
/// else is an error on that literal while compiling. The tool takes the caller as a
/// [`Principal`] (refused with a tool error when the call is anonymous) or an
/// `Option<Principal>`.
///
/// ```
/// use mcp_tasks::prelude::*;
///
/// /// Publish a report under the caller's name.
/// #[task_tool(mode = "optional", scopes = ["reports:write"])]
/// async fn publish_report(title: String, who: Principal) -> String {
///     let client = who.client_id.as_deref().unwrap_or("an unknown client");
///     format!("{title}, published by {} through {client}", who.subject)
/// }
///
/// /// Anyone may read; a signed-in caller is greeted by name.
/// #[task_tool]
/// async fn read_report(title: String, who: Option<Principal>) -> String {
///     let name = who.map_or_else(|| "stranger".to_owned(), |p| p.subject);
///     format!("{title}, for {name}")
/// }
/// # fn main() {}
/// ```
///
/// ## `name`, `title`, `description`: how the tool is presented
///
/// The name defaults to the function's name (a raw identifier loses its `r#`), and the
/// description to its doc comment: the lines joined with `\n`, the space after `///` dropped,
/// and the whole trimmed. A tool with neither a doc comment nor `description = "..."` compiles
/// with a warning on its name (`use of deprecated constant ... this tool has no
/// description`): the model reads the description to decide when to call the tool.
/// `description = ""` leaves it out on purpose, without the warning.
///
/// ```
/// # use mcp_tasks::prelude::*;
/// /// Not the description: `description = ...` wins.
/// #[task_tool(
///     name = "weather.current",
///     title = "Current weather",
///     description = "Get the current weather for a city.",
/// )]
/// async fn current_weather(city: String) -> String {
///     format!("sunny in {city}")
/// }
/// # fn main() {}
/// ```
///
/// ## `read_only`, `destructive`, `idempotent`, `open_world`: behaviour hints
///
/// Each is left out of the tool's `annotations` unless given. A bare flag means `true`.
///
/// `idempotent` (like taking [`Steps`]) also tells the runtime that running the tool again
/// does no harm, which it relies on in two places: such a tool may rerun after a restart
/// (`on_restart = "rerun"`), and a task of it that runs in this process at once (a free
/// slot, no idempotency key, not `unique`) has its tool polled once *before* the task is
/// stored. A tool that ends in that first poll is stored finished, in the create's one
/// write (a quick task then costs the store half as much); one that does not goes on as any
/// task does. The client is answered once the task is stored either way, and sees it start
/// as `working`. What the tool asks of the store in that poll (a question, a step) waits
/// for the create; if the create fails, the call is answered with an error and the tool's
/// future is dropped, so code before its first `.await` may have run for a call that is
/// then sent again. The client's answer waits for that first poll, so long work done
/// without an `.await` (which holds up a runtime thread in any async tool) also holds up
/// the answer: put it behind `tokio::task::spawn_blocking`. A tool not declared idempotent
/// starts only once its task is stored.
///
/// ```
/// # use mcp_tasks::prelude::*;
/// /// Delete a file.
/// #[task_tool(destructive, idempotent = true, read_only = false, open_world = false)]
/// async fn delete_file(path: String) -> Result<(), ToolError> {
///     # let _ = path;
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// ## `crate`: reaching the runtime under another name
///
/// The generated code names the runtime only through `::mcp_tasks::__private`. When
/// `mcp-tasks` is renamed in `Cargo.toml`, or re-exported by a crate of your own, point the
/// attribute at it with a path (or the same path as a string):
///
/// ```
/// use mcp_tasks as rt;
///
/// /// Echo the text back.
/// #[rt::task_tool(crate = crate::rt)]
/// async fn echo(text: String) -> String {
///     text
/// }
/// # fn main() {}
/// ```
///
/// # Parameters
///
/// Each parameter is either a field of the tool's input or a value injected from the call.
///
/// ## Input fields
///
/// An ordinary parameter becomes a property of the input object, named like the parameter.
/// Its type must implement `serde::Deserialize` and `schemars::JsonSchema` (derive them with
/// your own `serde` and `schemars` dependencies). A parameter whose type is spelled
/// `Option<T>` may be left out, and is then `None`. Properties the function does not take are
/// refused (the schema says `"additionalProperties": false`).
///
/// Input parameters are passed by value (`String`, not `&str`) and must be plain names
/// (`pages` or `mut pages`); to destructure, take the whole input with `#[input]`.
///
/// ## `#[arg(...)]`
///
/// | key | effect |
/// | --- | --- |
/// | `description = "..."` | the property's description in the schema |
/// | `default = <expr>` | the value used when the property is missing; evaluated on each call, and listed as the schema's `default` when the type is `Serialize` |
/// | `rename = "..."` | the property's name in JSON (the Rust name is unchanged) |
///
/// A bare `#[arg]` marks the parameter as an input field without changing anything else (see
/// [below](#a-type-of-your-own-named-progress)).
///
/// ```
/// # use mcp_tasks::prelude::*;
/// /// Crawl a site.
/// #[task_tool(read_only)]
/// async fn crawl(
///     #[arg(description = "The page to start from.")] url: String,
///     #[arg(default = 2, description = "How many links deep to go.")] depth: u32,
///     #[arg(rename = "userAgent")] user_agent: Option<String>,
/// ) -> String {
///     format!("{url} {depth} {}", user_agent.unwrap_or_default())
/// }
/// # fn main() {}
/// ```
///
/// ## `#[input]`: one type for the whole input
///
/// A single parameter marked `#[input]` receives the whole input; its type's schema is the
/// tool's input schema, so it must be an object (a struct with named fields). No other
/// parameter can then be an input field, but injected ones are fine. The pattern may
/// destructure.
///
/// ```
/// # use mcp_tasks::prelude::*;
/// /// The canvas size.
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Size {
///     /// Width in pixels.
///     width: u32,
///     /// Height in pixels.
///     height: u32,
/// }
///
/// /// Resize the canvas.
/// #[task_tool]
/// async fn resize(#[input] Size { width, height }: Size, progress: Progress) -> String {
///     progress.report(1.0, Some(1.0));
///     format!("{width}x{height}")
/// }
/// # fn main() {}
/// ```
///
/// ## Injected parameters
///
/// | type | what it is |
/// | --- | --- |
/// | [`Progress`] | reports progress (and a task's status message) |
/// | [`Steps`] | durable steps: each runs once per task, and a rerun reads its output back ([below](#durable-steps-steps)) |
/// | [`TaskContext`] | everything about the call: task id, cancellation, client, logs |
/// | [`Client`] | asks the client: elicitation, sampling, roots |
/// | [`CancellationToken`] | fires when the client cancels the call or the task |
/// | [`Principal`] | the authenticated caller: subject, scopes, client, issuer; an anonymous call is refused ([above](#scopes-who-may-call)) |
/// | `Option<Principal>` | the caller, `None` for an anonymous call |
/// | [`State<T>`] | application state registered with `ServerBuilder::state` |
/// | any type marked `#[inject]` | built by its [`FromTaskContext`] implementation |
///
/// They are recognised by the last segment of the type's path, so `Progress`,
/// `mcp_tasks::Progress` and `rt::Progress` are all injected. Each one can be taken once, in
/// any position. A type alias, or a type of your own that implements [`FromTaskContext`],
/// needs `#[inject]`:
///
/// ```
/// use mcp_tasks::prelude::*;
/// use mcp_tasks::FromTaskContext;
///
/// /// Who is calling: an authenticated principal.
/// struct Caller(String);
///
/// impl FromTaskContext for Caller {
///     /// A call with no principal is refused with this error; the tool does not run.
///     type Rejection = ToolError;
///
///     fn from_task_context(cx: &TaskContext) -> Result<Self, ToolError> {
///         cx.principal()
///             .map(|p| Caller(p.subject.clone()))
///             .ok_or_else(|| ToolError::new("sign in to use this tool"))
///     }
/// }
///
/// /// Greet the caller, who must be signed in.
/// #[task_tool]
/// async fn greet(#[inject] caller: Caller, cx: TaskContext, greeting: String) -> String {
///     cx.info("greeting");
///     format!("{greeting}, {}", caller.0)
/// }
///
/// /// Greet anyone: `Option<T>` is `None` where `T` is rejected.
/// #[task_tool]
/// async fn greet_anyone(#[inject] caller: Option<Caller>, greeting: String) -> String {
///     let name = caller.map_or_else(|| "stranger".to_owned(), |c| c.0);
///     format!("{greeting}, {name}")
/// }
/// # fn main() {}
/// ```
///
/// `Result<T, T::Rejection>` hands the rejection to the tool instead. Types that are always
/// there say `type Rejection = std::convert::Infallible`.
///
/// ## Application state
///
/// A database pool, an HTTP client or a configuration is registered once on the builder and
/// taken as `State<T>`, one parameter per type. `State<T>` derefs to `T` and is cheap to clone
/// (it shares one `Arc`). A server whose tools take a state type nobody registered fails to
/// build, with an error naming the tool and the type; workers that run the tasks register the
/// same state.
///
/// ```
/// use mcp_tasks::prelude::*;
///
/// /// Stands in for a connection pool.
/// struct Pool { url: String }
///
/// /// Counts the rows of a table.
/// #[task_tool(mode = "optional")]
/// async fn count_rows(table: String, pool: State<Pool>) -> String {
///     format!("counted {table} on {}", pool.url)
/// }
///
/// # fn main() -> anyhow::Result<()> {
/// let server = Server::builder()
///     .registry_tools()
///     .state(Pool { url: "postgres://localhost/app".into() })
///     .build()?;
/// # let _ = server;
/// // Without `.state(Pool { .. })` the build fails:
/// // the tool "count_rows" takes state of type `Pool`, which is not registered
/// assert!(Server::builder().registry_tools().build().is_err());
/// # Ok(()) }
/// ```
///
/// ## Durable steps: `Steps`
///
/// A tool that does several things with effects (charge a card, then mail a receipt) takes
/// [`Steps`] and runs each of them as a named step: `steps.run("charge", || async { ... })`.
/// A step's output (anything `Serialize + Deserialize`, at most 64 KiB of JSON) is stored
/// in the task's record before `run` returns. When the task runs again after a restart
/// (`on_restart = "rerun"`), a step whose output is stored is not run again: `run` returns
/// its output. So a tool made of steps may rerun without being declared `idempotent`; taking
/// `Steps` declares it (`Tool::durable_steps`). A step is still done once more if the
/// process dies between doing it and storing its output, so make each step idempotent on its
/// own where that matters (with the task id as a key, say).
///
/// Each step of a run needs a name of its own (1 to 200 characters): a name that already
/// gave an output in this run is an error, and so is an output over the limit. A step that
/// fails stores nothing and may be tried again. When another process has taken the task over
/// (this one's lease lapsed), the output is not stored and `run` fails, and the run stops
/// without storing its outcome. A call that does not run as a task stores nothing: every
/// step simply runs.
///
/// ```
/// use mcp_tasks::prelude::*;
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// static CHARGED: AtomicU32 = AtomicU32::new(0);
/// static MAILED: AtomicU32 = AtomicU32::new(0);
///
/// /// Charge for an order, then mail its receipt.
/// #[task_tool(mode = "required", on_restart = "rerun")]
/// async fn check_out(order: String, steps: Steps) -> Result<String, ToolError> {
///     let receipt: String = steps
///         .run("charge", || async {
///             CHARGED.fetch_add(1, Ordering::SeqCst);
///             Ok(format!("receipt-{order}"))
///         })
///         .await?;
///     steps
///         .run("mail", || async {
///             MAILED.fetch_add(1, Ordering::SeqCst);
///             Ok(())
///         })
///         .await?;
///     Ok(format!("{receipt} mailed"))
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     // Outside a task every step runs.
///     let text = check_out("A-1".into(), Steps::detached()).await?;
///     assert_eq!(text, "receipt-A-1 mailed");
///     assert_eq!((CHARGED.load(Ordering::SeqCst), MAILED.load(Ordering::SeqCst)), (1, 1));
///     // `Steps` makes the tool one that may rerun after a restart.
///     let server = Server::from_registry()?;
///     assert_eq!(server.tools().get("check_out").unwrap().mode(), TaskSupport::Required);
///     Ok(())
/// }
/// ```
///
/// ## A type of your own named `Progress`
///
/// Recognition goes by name, so a type of your own called `Progress`, `Steps`, `TaskContext`,
/// `Client` or `CancellationToken` is taken for the injectable one, and the compiler then
/// says it "cannot be injected into a `#[task_tool]` function". Mark such a parameter `#[arg]`
/// to make it an input field:
///
/// ```
/// # use mcp_tasks::task_tool;
/// /// Where the caller got to.
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Progress {
///     done: u32,
/// }
///
/// /// Resume where the caller left off.
/// #[task_tool]
/// async fn resume(#[arg] progress: Progress, reporter: mcp_tasks::Progress) -> String {
///     reporter.report(progress.done.into(), None);
///     format!("resuming at {}", progress.done)
/// }
/// # fn main() {}
/// ```
///
/// # Return type
///
/// The function may return anything that implements [`IntoToolResult`]:
///
/// | return type | tool result |
/// | --- | --- |
/// | nothing (`()`) | no content |
/// | `String`, `&'static str` | one text block |
/// | `Content`, `Vec<Content>` | those blocks |
/// | `CallToolResult` | as is |
/// | [`Json<T>`][Json] | `structuredContent`, plus its JSON as text; the tool's `outputSchema` comes from `T`, a struct with named fields (MCP requires an object) |
/// | `Result<T, E>` | `Ok` as above; `Err` becomes a result with `isError: true` (or a JSON-RPC error for a `ProtocolError`) |
///
/// Structured output is a JSON object: `Json<T>` of a struct with named fields, a map with
/// string keys, or an enum whose variants are all objects. `Json<Vec<String>>` (or of a string,
/// a number, an `Option`, a tuple) fails to compile with "`Vec<String>` is not a JSON object";
/// put the list in a struct, `Json<Files>` with `struct Files { files: Vec<String> }`. Any
/// other type whose schema is not an object makes the server fail to build, naming the tool.
///
/// The error type `E` may be [`ToolError`], `anyhow::Error` (so `anyhow::Result<T>` works),
/// `Box<dyn std::error::Error + Send + Sync>`, or any error type of your own that implements
/// `std::error::Error + Send + Sync + 'static`. Its message, followed by the messages of its
/// sources, is the text the model reads. Inside a tool returning `Result<T, ToolError>`, `?`
/// converts `anyhow::Error`, boxed errors, `std::io::Error`, `serde_json::Error` and
/// `String`; other error types go through [`ToolError::new`] or become the function's error
/// type.
///
/// ```
/// use mcp_tasks::prelude::*;
///
/// #[derive(Debug)]
/// struct Offline;
///
/// impl std::fmt::Display for Offline {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("the printer is offline")
///     }
/// }
///
/// impl std::error::Error for Offline {}
///
/// /// Print a page.
/// #[task_tool]
/// async fn print(page: u32) -> Result<String, Offline> {
///     if page == 0 { Err(Offline) } else { Ok(format!("printed page {page}")) }
/// }
///
/// /// Read a setting.
/// #[task_tool]
/// async fn setting(key: String) -> anyhow::Result<String> {
///     anyhow::ensure!(!key.is_empty(), "the key is empty");
///     Ok(format!("{key}=on"))
/// }
///
/// /// Parse a number, with `?` on an `anyhow::Error`.
/// #[task_tool]
/// async fn parse(text: String) -> Result<String, ToolError> {
///     let n: i64 = anyhow::Context::context(text.parse::<i64>(), "not a number")?;
///     Ok((n * 2).to_string())
/// }
/// # fn main() {}
/// ```
///
/// # Compile errors
///
/// Mistakes are reported while compiling, on the token that is wrong, and all of them at
/// once:
///
/// | mistake | reported on |
/// | --- | --- |
/// | the function is not `async` | `fn` |
/// | `const`, `unsafe`, `extern "C"` or `...` | that keyword |
/// | generic parameters or a `where` clause | the generics |
/// | a `self` parameter | `self` |
/// | a destructuring pattern on an input field | the pattern |
/// | an `impl Trait` parameter or return type, a `&` parameter | the type |
/// | an input type that is not `Deserialize` or `JsonSchema` | that parameter's type |
/// | an injected type that is not `FromTaskContext` | that parameter's type |
/// | the same injected type twice | the second one |
/// | `#[input]` next to an input field | the input field |
/// | a return type that is not `IntoToolResult` | the return type |
/// | `Json<T>` of a list, string, number, `Option` or tuple (not a JSON object) | `T` |
/// | a future that is not `Send` | the function's name (with a note on the value held across an `.await`) |
/// | an unknown, repeated or valueless argument | its key; unknown keys list the valid ones |
/// | a bad mode, duration, name or flag value | the literal |
/// | `on_restart = "rerun"` without `idempotent` or a `Steps` parameter; `on_unresumable = "rerun"` without `idempotent` | `"rerun"` |
/// | `unique = [...]` naming something that is not an argument (the message lists the arguments), empty, with a name twice or an element that is not a string | that element, or the list |
/// | `unique` with `mode = "forbidden"` | `unique` |
/// | `unique_window` without `unique` | the duration |
/// | a function name that is not a valid tool name | the name (use `name = "..."`) |
///
/// The tool's name is held to the rule tool registration applies, the runtime's
/// [`is_valid_tool_name`]: the generated code calls it in a `const`, so a bad name fails that
/// constant's evaluation (`error[E0080]: evaluation panicked: invalid tool name: ...`) on the
/// `name = "..."` literal or the function's name, under `cargo check` too. The constant is
/// only generated once the attribute has no other error, so a bad name is reported after
/// those.
///
/// For instance, a tool must be an `async fn`:
///
/// ```compile_fail
/// use mcp_tasks::task_tool;
///
/// #[task_tool]
/// fn not_async() {}
/// # fn main() {}
/// ```
///
/// # Limits
///
/// - `#[task_tool]` goes on free functions: not on methods, nor inside `impl` or `trait`
///   blocks.
/// - Registration uses [`inventory`](https://docs.rs/inventory): a tool defined in a library
///   is served only when that library is linked into the binary (use one of its items).
/// - Two tools with the same name make [`Server::from_registry`] fail with an error naming
///   both definitions.
///
/// # What it expands to
///
/// Roughly, for `async fn render(pages: u32, progress: Progress) -> String`:
///
/// ```text
/// async fn render(pages: u32, progress: Progress) -> String { ... } // untouched
///
/// const _: () = {
///     const _: () = assert_fn_tool_name("render"); // the runtime's name rule, while compiling
///
///     #[derive(Deserialize, JsonSchema)]
///     #[serde(deny_unknown_fields)]
///     struct __McpTasksInput { pages: u32 }
///
///     fn __mcp_tasks_call(cx: TaskContext, args: JsonObject) -> ToolFuture {
///         tool_future(async move {
///             let input = <__McpTasksInput as ToolInput>::parse(args)?;
///             let progress = Progress::from_task_context(&cx).map_err(rejected)?;
///             let output = render(input.pages, progress).await;
///             output.into_tool_result()
///         })
///     }
///
///     inventory::submit! { ToolRegistration { name: "render", call: __mcp_tasks_call, ... } }
/// };
/// ```
///
/// Every path goes through `::mcp_tasks::__private` (or the `crate = ...` path), so names in
/// scope at the call site (a `Result` or `Box` of your own) do not matter. Set the
/// environment variable `MCP_TASKS_MACROS_DEBUG` while compiling to print each expansion
/// (`1` for all, or a function's name for one).
///
///
// The links of this manual resolve where users read it: on the `mcp-tasks` re-export, whose
// docs define them as intra-doc links (this crate cannot name the runtime's items). For this
// crate's own page they lead to the `mcp_tasks` pages `cargo doc` writes beside it.
#[cfg_attr(doc, doc = "[`Progress`]: ../mcp_tasks/struct.Progress.html")]
#[cfg_attr(doc, doc = "[`Steps`]: ../mcp_tasks/struct.Steps.html")]
#[cfg_attr(doc, doc = "[`Unique`]: ../mcp_tasks/struct.Unique.html")]
#[cfg_attr(doc, doc = "[`TaskContext`]: ../mcp_tasks/struct.TaskContext.html")]
#[cfg_attr(
    doc,
    doc = "[`TaskContext::detach`]: ../mcp_tasks/struct.TaskContext.html#method.detach"
)]
#[cfg_attr(doc, doc = "[`Client`]: ../mcp_tasks/struct.Client.html")]
#[cfg_attr(
    doc,
    doc = "[`Principal`]: ../mcp_tasks/principal/struct.Principal.html"
)]
#[cfg_attr(doc, doc = "[`State<T>`]: ../mcp_tasks/struct.State.html")]
#[cfg_attr(
    doc,
    doc = "[`CancellationToken`]: ../mcp_tasks/struct.CancellationToken.html"
)]
#[cfg_attr(
    doc,
    doc = "[`FromTaskContext`]: ../mcp_tasks/trait.FromTaskContext.html"
)]
#[cfg_attr(
    doc,
    doc = "[`IntoToolResult`]: ../mcp_tasks/trait.IntoToolResult.html"
)]
#[cfg_attr(doc, doc = "[`ToolError`]: ../mcp_tasks/struct.ToolError.html")]
#[cfg_attr(
    doc,
    doc = "[`ToolError::new`]: ../mcp_tasks/struct.ToolError.html#method.new"
)]
#[cfg_attr(doc, doc = "[`TaskSupport`]: ../mcp_tasks/model/enum.TaskSupport.html")]
#[cfg_attr(
    doc,
    doc = "[`is_valid_tool_name`]: ../mcp_tasks/tool/fn.is_valid_tool_name.html"
)]
#[cfg_attr(
    doc,
    doc = "[`Server::from_registry`]: ../mcp_tasks/struct.Server.html#method.from_registry"
)]
#[cfg_attr(doc, doc = "[Json]: ../mcp_tasks/struct.Json.html")]
#[cfg_attr(doc, doc = "[Serve it]: ../mcp_tasks/index.html#serve-it")]
#[cfg_attr(
    doc,
    doc = "[Logs and metrics]: ../mcp_tasks/index.html#logs-and-metrics"
)]
#[cfg_attr(
    doc,
    doc = "[`ServerBuilder::parked_call_timeout`]: ../mcp_tasks/struct.ServerBuilder.html#method.parked_call_timeout"
)]
#[cfg_attr(
    doc,
    doc = "[`ServerBuilder::max_parked_calls`]: ../mcp_tasks/struct.ServerBuilder.html#method.max_parked_calls"
)]
#[proc_macro_attribute]
pub fn task_tool(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::task_tool(args.into(), item.into()).into()
}
