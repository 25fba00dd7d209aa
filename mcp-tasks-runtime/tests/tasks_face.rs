//! The public task face (`Server::tasks()`): what owners and admins see and do, with tasks
//! created over MCP, on paused time.

use mcp_tasks_runtime::CallOutcome;
use mcp_tasks_runtime::model::{Content, JsonObject, TaskSupport, ToolAnnotations};
use mcp_tasks_runtime::store::{MemoryTaskStore, TaskFilter};
use mcp_tasks_runtime::task::TaskStatus;
use mcp_tasks_runtime::{RestartPolicy, Server, Tool, Viewer};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Client, asking_tool, tasks_caps, text};

mod support;

fn server() -> Server {
    Server::builder()
        .tool(
            Tool::new("slow", |cx, _| async move {
                for i in 1..=3 {
                    cx.progress().report(f64::from(i), Some(3.0));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                text("slow done")
            })
            .task_support(TaskSupport::Required)
            .poll_interval(Duration::from_millis(200)),
        )
        .tool(
            Tool::new("again", |_, args: JsonObject| async move {
                text(format!(
                    "again {}",
                    args.get("n").cloned().unwrap_or_default()
                ))
            })
            .task_support(TaskSupport::Required)
            .annotations(ToolAnnotations {
                idempotent_hint: Some(true),
                ..Default::default()
            })
            .on_restart(RestartPolicy::Rerun),
        )
        .tool(
            asking_tool("ask", "name?", "name", "string", "hello ")
                .task_support(TaskSupport::Required),
        )
        .store(MemoryTaskStore::new())
        .build()
        .expect("server")
}

/// A 2026-07-28 caller authenticated as `principal`.
struct Caller(Client);

impl Caller {
    fn new(server: &Server, principal: &str) -> Self {
        Self(Client::stateless_as(server, Some(principal), tasks_caps()))
    }

    /// Calls `tool` as a task; its id.
    async fn call(&mut self, tool: &str, arguments: Value) -> String {
        let reply = self.0.call(tool, arguments).await;
        assert_eq!(reply["result"]["resultType"], "task", "{reply}");
        reply["result"]["taskId"].as_str().unwrap().to_owned()
    }
}

#[tokio::test(start_paused = true)]
async fn owners_see_their_own_tasks_and_admins_see_every_task() {
    let server = server();
    let tasks = server.tasks();
    let ann_id = Caller::new(&server, "ann").call("slow", json!({})).await;
    let bob_id = Caller::new(&server, "bob").call("slow", json!({})).await;
    let ann = Viewer::principal("ann");
    let admin = Viewer::admin("oncall");

    assert!(tasks.get(&ann, &ann_id).await.unwrap().is_some());
    assert!(
        tasks.get(&ann, &bob_id).await.unwrap().is_none(),
        "another owner's task"
    );
    assert!(tasks.get(&admin, &bob_id).await.unwrap().is_some());

    let all = TaskFilter::new();
    let listed = |page: mcp_tasks_runtime::store::TaskPage| -> Vec<String> {
        page.tasks.into_iter().map(|t| t.id).collect()
    };
    assert_eq!(
        listed(tasks.list(&ann, &all, None, 10).await.unwrap()),
        std::slice::from_ref(&ann_id)
    );
    assert_eq!(
        listed(tasks.list(&admin, &all, None, 10).await.unwrap()),
        [bob_id.clone(), ann_id.clone()],
        "newest first"
    );
    // An owner asking for another owner's tasks gets none.
    let bobs = TaskFilter::new().owner("principal:bob");
    assert!(
        tasks
            .list(&ann, &bobs, None, 10)
            .await
            .unwrap()
            .tasks
            .is_empty()
    );
    assert_eq!(
        listed(tasks.list(&admin, &bobs, None, 10).await.unwrap()),
        std::slice::from_ref(&bob_id)
    );

    let counts = tasks.count(&admin).await.unwrap();
    assert_eq!(counts.of_status(TaskStatus::Working), 2);
    assert_eq!(tasks.count(&ann).await.unwrap().total(), 1);

    // An owner cannot cancel another's task; an admin can, and is recorded as who did.
    assert!(tasks.cancel(&ann, &bob_id).await.unwrap().is_none());
    let (cancelled, now) = tasks.cancel(&admin, &bob_id).await.unwrap().unwrap();
    assert!(now);
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    assert_eq!(
        cancelled.cancel_requested.unwrap().by.as_deref(),
        Some("admin:oncall")
    );
    let working = TaskFilter::new().status(TaskStatus::Working);
    assert_eq!(
        listed(tasks.list(&admin, &working, None, 10).await.unwrap()),
        [ann_id]
    );
    assert!(
        tasks
            .list(&admin, &all, Some("not a cursor"), 10)
            .await
            .is_err(),
        "a made-up cursor"
    );
}

#[tokio::test(start_paused = true)]
async fn follow_yields_each_version_until_the_task_ends() {
    let server = server();
    let id = Caller::new(&server, "ann").call("slow", json!({})).await;
    let mut follower = server
        .tasks()
        .follow(&Viewer::principal("ann"), &id)
        .unwrap();
    let mut versions = Vec::new();
    let mut last = None;
    while let Some(record) = follower.next().await {
        let record = record.unwrap();
        assert!(last < Some(record.version), "versions only go up");
        last = Some(record.version);
        versions.push(record.status);
    }
    assert_eq!(versions.first(), Some(&TaskStatus::Working));
    assert_eq!(versions.last(), Some(&TaskStatus::Completed));
    assert!(follower.next().await.is_none(), "nothing after the end");
    // Another owner follows nothing.
    let mut other = server
        .tasks()
        .follow(&Viewer::principal("bob"), &id)
        .unwrap();
    assert!(other.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn an_admin_answers_a_question_and_reruns_only_rerunnable_tools() {
    let server = server();
    let tasks = server.tasks();
    let admin = Viewer::admin("oncall");
    let mut ann = Caller::new(&server, "ann");
    let asking = ann.call("ask", json!({})).await;
    let mut follower = tasks.follow(&admin, &asking).unwrap();
    let waiting = loop {
        let record = follower.next().await.unwrap().unwrap();
        if record.status == TaskStatus::InputRequired {
            break record;
        }
    };
    let key = waiting.input_requests.keys().next().unwrap().clone();
    let mut responses = JsonObject::new();
    responses.insert(key, json!({"action": "accept", "content": {"name": "Ann"}}));
    tasks
        .answer(&admin, &asking, &responses)
        .await
        .unwrap()
        .unwrap();
    let done = loop {
        let record = follower.next().await.unwrap().unwrap();
        if record.status.is_terminal() {
            break record;
        }
    };
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    let Some(CallOutcome::Result(result)) = done.outcome.as_deref() else {
        panic!("{done:?}");
    };
    assert_eq!(result.content, vec![Content::text("hello \"Ann\"")]);

    // `ask` does not rerun; `again` does, as a new task of the same owner.
    let refused = tasks.rerun(&admin, &asking).await.unwrap_err();
    assert!(refused.to_string().contains("does not rerun"), "{refused}");
    let first = ann.call("again", json!({"n": 7})).await;
    let mut follower = tasks.follow(&admin, &first).unwrap();
    while follower.next().await.is_some() {}
    let again = tasks.rerun(&admin, &first).await.unwrap().unwrap();
    assert_ne!(again.id, first);
    assert_eq!(again.owner.as_deref(), Some("principal:ann"));
    assert_eq!(again.arguments.get("n"), Some(&json!(7)));
    // An owner may rerun its own task, not another's.
    assert!(
        tasks
            .rerun(&Viewer::principal("bob"), &first)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_keeps_its_status_history_and_the_trace_context_of_its_call() {
    let server = server();
    let tasks = server.tasks();
    let admin = Viewer::admin("oncall");
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    // 2026-07-28: the trace context rides in the call's `_meta`.
    let mut ann = Caller::new(&server, "ann");
    let reply = ann
        .0
        .call_with(
            "ask",
            json!({"_meta": {"traceparent": traceparent, "tracestate": "ann=1", "baggage": "tenant=acme"}}),
        )
        .await;
    let asking = reply["result"]["taskId"].as_str().unwrap().to_owned();
    let mut follower = tasks.follow(&admin, &asking).unwrap();
    let waiting = loop {
        let record = follower.next().await.unwrap().unwrap();
        if record.status == TaskStatus::InputRequired {
            break record;
        }
    };
    let trace = waiting.trace.as_deref().expect("the call's trace context");
    assert_eq!(trace.traceparent, traceparent);
    assert_eq!(trace.trace_id(), "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(trace.tracestate.as_deref(), Some("ann=1"));
    assert_eq!(trace.baggage.as_deref(), Some("tenant=acme"));
    let key = waiting.input_requests.keys().next().unwrap().clone();
    let mut responses = JsonObject::new();
    responses.insert(key, json!({"action": "accept", "content": {"name": "Ann"}}));
    tasks.answer(&admin, &asking, &responses).await.unwrap();
    while follower.next().await.is_some() {}
    let done = tasks.get(&admin, &asking).await.unwrap().unwrap();
    let statuses: Vec<TaskStatus> = done.history.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [
            TaskStatus::InputRequired,
            TaskStatus::Working,
            TaskStatus::Completed
        ],
        "{:?}",
        done.history
    );
    // Each change is dated, in order, made under the run's claim by this process.
    assert!(done.history.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(done.history[0].at >= done.created_at);
    assert!(
        done.history
            .iter()
            .all(|c| c.epoch == 1 && c.process.is_some())
    );

    // A cancelled task's last change is the cancel; a call without a trace context, or
    // with one that is not W3C's, keeps none.
    let slow = ann
        .0
        .call_with(
            "slow",
            json!({"_meta": {"traceparent": "not-a-traceparent"}}),
        )
        .await;
    let slow = slow["result"]["taskId"].as_str().unwrap().to_owned();
    tasks.cancel(&admin, &slow).await.unwrap().unwrap();
    let cancelled = tasks.get(&admin, &slow).await.unwrap().unwrap();
    assert_eq!(cancelled.trace, None);
    let last = cancelled.history.last().expect("the cancel");
    assert_eq!(last.status, TaskStatus::Cancelled);
    assert_eq!(last.message.as_deref(), cancelled.status_message.as_deref());

    // 2025-11-25: the same `_meta` keys of a task-augmented call.
    let (mut old, _) = support::Client::stateful(&server).await;
    let reply = old
        .call_with(
            "slow",
            json!({"task": {}, "_meta": {"traceparent": traceparent}}),
        )
        .await;
    let id = reply["result"]["task"]["taskId"].as_str().unwrap();
    let record = tasks.get(&admin, id).await.unwrap().unwrap();
    assert_eq!(record.trace.as_deref().unwrap().traceparent, traceparent);
    assert_eq!(record.trace.as_deref().unwrap().tracestate, None);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_store_alone_gives_a_read_only_face() {
    use mcp_tasks_runtime::Tasks;
    use mcp_tasks_runtime::store::SqliteTaskStore;
    let dir = std::env::temp_dir().join(format!("mcp-tasks-face-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tasks.db");
    let _ = std::fs::remove_file(&path);
    let server = Server::builder()
        .tool(
            Tool::new("again", |_, _| async move { text("done") })
                .task_support(TaskSupport::Required),
        )
        .store(SqliteTaskStore::open(&path).unwrap())
        .build()
        .unwrap();
    let id = Caller::new(&server, "ann").call("again", json!({})).await;

    let face = Tasks::read_only(SqliteTaskStore::open(&path).unwrap());
    let anyone = Viewer::admin("cli");
    let page = face
        .list(&anyone, &TaskFilter::new(), None, 10)
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
    assert_eq!(page.tasks[0].id, id);
    assert!(face.get(&anyone, &id).await.unwrap().is_some());
    assert_eq!(face.count(&anyone).await.unwrap().of_tool("again"), 1);
    let refused = face.cancel(&anyone, &id).await.unwrap_err();
    assert!(refused.to_string().contains("read-only"), "{refused}");
    let _ = std::fs::remove_dir_all(&dir);
}
