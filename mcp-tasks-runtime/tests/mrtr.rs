//! Synchronous 2026-07-28 calls that ask questions: the call is suspended on its question and
//! the client's retry resumes it, so nothing before the question runs twice. Whole requests
//! through a `Session`, with no transport.

use mcp_tasks_runtime::model::{Content, ResourceContents, ToolAnnotations};
use mcp_tasks_runtime::prompt::{GetPromptResult, PromptMessage};
use mcp_tasks_runtime::{
    Prompt, Resource, ResumePolicy, Server, ServerBuilder, TaskContext, Tool, ToolError,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::{Client, tasks_caps, text};
use tokio::sync::Notify;

mod support;

const KEY: [u8; 32] = [42; 32];

/// Counts what the handlers did, shared by every server of one test.
#[derive(Clone, Default)]
struct Counters {
    /// Side effects done before (or between) questions.
    effects: Arc<AtomicUsize>,
    /// Runs of `lookup` (idempotent, reruns a lost call).
    lookups: Arc<AtomicUsize>,
    /// Calls whose future was dropped, however they ended.
    dropped: Arc<AtomicUsize>,
    /// Calls that saw their cancellation token fire.
    cancelled: Arc<AtomicUsize>,
    /// Fired when `slow_finish` got its answer.
    resumed: Arc<Notify>,
}

/// Counts a dropped future.
struct DropGuard(Arc<AtomicUsize>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn schema(field: &str, kind: &str) -> Value {
    json!({"type": "object", "properties": {field: {"type": kind}}, "required": [field]})
}

fn field(answer: &mcp_tasks_runtime::model::ElicitResult, name: &str) -> String {
    match answer.content.as_ref().and_then(|c| c.get(name)) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "-".into(),
    }
}

async fn ask(cx: &TaskContext, key: Option<&str>, field_name: &str) -> Result<String, ToolError> {
    let client = cx.client();
    let message = format!("{field_name}?");
    let answer = match key {
        Some(key) => {
            client
                .elicit_keyed(key, message, schema(field_name, "string"))
                .await?
        }
        None => client.elicit(message, schema(field_name, "string")).await?,
    };
    Ok(field(&answer, field_name))
}

fn builder(counters: &Counters) -> ServerBuilder {
    let c = counters.clone();
    let import = Tool::new("import", move |cx, _| {
        let c = c.clone();
        async move {
            let _guard = DropGuard(Arc::clone(&c.dropped));
            c.effects.fetch_add(1, Ordering::SeqCst);
            let asked = ask(&cx, None, "confirm").await;
            if cx.is_cancelled() {
                c.cancelled.fetch_add(1, Ordering::SeqCst);
            }
            text(format!("imported: {}", asked?))
        }
    });
    let c = counters.clone();
    let wizard = Tool::new("wizard", move |cx, _| {
        let c = c.clone();
        async move {
            c.effects.fetch_add(1, Ordering::SeqCst);
            let name = ask(&cx, None, "name").await?;
            c.effects.fetch_add(1, Ordering::SeqCst);
            let color = ask(&cx, None, "color").await?;
            text(format!("{name} likes {color}"))
        }
    });
    let c = counters.clone();
    let parallel = Tool::new("parallel", move |cx, _| {
        let c = c.clone();
        async move {
            c.effects.fetch_add(1, Ordering::SeqCst);
            let (a, b) = tokio::join!(ask(&cx, Some("a"), "first"), ask(&cx, Some("b"), "second"));
            text(format!("{} {}", a?, b?))
        }
    });
    let c = counters.clone();
    let lookup = Tool::new("lookup", move |cx, _| {
        let c = c.clone();
        async move {
            c.lookups.fetch_add(1, Ordering::SeqCst);
            let first = ask(&cx, None, "first").await?;
            let second = ask(&cx, None, "second").await?;
            text(format!("{first} {second}"))
        }
    })
    .annotations(ToolAnnotations {
        idempotent_hint: Some(true),
        ..Default::default()
    })
    .on_unresumable(ResumePolicy::Rerun);
    let c = counters.clone();
    let slow_finish = Tool::new("slow_finish", move |cx, _| {
        let c = c.clone();
        async move {
            let _guard = DropGuard(Arc::clone(&c.dropped));
            c.effects.fetch_add(1, Ordering::SeqCst);
            let answer = ask(&cx, None, "go").await?;
            c.resumed.notify_one();
            cx.cancellation().cancelled().await;
            c.cancelled.fetch_add(1, Ordering::SeqCst);
            text(format!("stopped after {answer}"))
        }
    });
    let c = counters.clone();
    let prelude = Tool::new("prelude", move |cx, _| {
        let c = c.clone();
        async move {
            c.effects.fetch_add(1, Ordering::SeqCst);
            let name = ask(&cx, None, "name").await?;
            cx.detach().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            text(format!("Hello, {name}! (from a task)"))
        }
    })
    .task_support(mcp_tasks_runtime::model::TaskSupport::Required)
    .prelude(true);
    let c = counters.clone();
    let prompt = Prompt::new("confirm_prompt", move |cx, _| {
        let c = c.clone();
        async move {
            c.effects.fetch_add(1, Ordering::SeqCst);
            let topic = ask(&cx, None, "topic").await?;
            Ok(GetPromptResult {
                description: None,
                messages: vec![PromptMessage::user(Content::text(format!(
                    "Write about {topic}."
                )))],
            })
        }
    });
    let c = counters.clone();
    let resource = Resource::new("test://ask", "ask", move |cx, uri| {
        let c = c.clone();
        async move {
            c.effects.fetch_add(1, Ordering::SeqCst);
            let who = ask(&cx, None, "who").await?;
            Ok(vec![ResourceContents {
                uri,
                mime_type: Some("text/plain".into()),
                text: Some(format!("for {who}")),
                blob: None,
            }])
        }
    });
    let c = counters.clone();
    let lookup_resource = Resource::new("test://lookup", "lookup", move |cx, uri| {
        let c = c.clone();
        async move {
            c.lookups.fetch_add(1, Ordering::SeqCst);
            let who = ask(&cx, None, "who").await?;
            Ok(vec![ResourceContents {
                uri,
                mime_type: None,
                text: Some(format!("found {who}")),
                blob: None,
            }])
        }
    })
    .on_unresumable(ResumePolicy::Rerun);
    let reporter = Tool::new("report_after", |cx, _| async move {
        let step = ask(&cx, None, "step").await?;
        cx.progress().report(1.0, Some(1.0));
        text(format!("reported {step}"))
    });
    Server::builder()
        .request_state_key(KEY)
        .tool(reporter)
        .resource(lookup_resource)
        .tool(import)
        .tool(wizard)
        .tool(parallel)
        .tool(lookup)
        .tool(slow_finish)
        .tool(prelude)
        .prompt(prompt)
        .resource(resource)
}

/// Waits (at most ten seconds) until `counter` reaches `n`: a cancelled call cleans up in the
/// background.
async fn eventually(counter: &AtomicUsize, n: usize, what: &str) {
    let reached = tokio::time::timeout(Duration::from_secs(10), async {
        while counter.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "{what}");
}

/// A 2026-07-28 client that can answer questions.
fn client(server: &Server) -> Client {
    Client::stateless(server, json!({"elicitation": {}}))
}

fn accept(field: &str, value: &str) -> Value {
    json!({"action": "accept", "content": {field: value}})
}

/// The keys of an `InputRequiredResult`, and its state.
fn asked(reply: &Value) -> (Vec<String>, Value) {
    let result = &reply["result"];
    assert_eq!(result["resultType"], "input_required", "{reply}");
    let keys = result["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    (keys, result["requestState"].clone())
}

fn answered(reply: &Value) -> &str {
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    reply["result"]["content"][0]["text"].as_str().unwrap()
}

fn error(reply: &Value) -> (i64, String) {
    let e = &reply["error"];
    (
        e["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("not an error: {reply}")),
        e["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn a_question_resumes_the_call_instead_of_running_it_again() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let (keys, state) = asked(&c.call_with("import", json!({})).await);
    assert_eq!(keys, ["elicit-1"]);
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
    let r = c
        .call_with(
            "import",
            json!({"requestState": state, "inputResponses": {"elicit-1": accept("confirm", "yes")}}),
        )
        .await;
    assert_eq!(answered(&r), "imported: yes");
    assert_eq!(
        counters.effects.load(Ordering::SeqCst),
        1,
        "the side effect before the question ran once"
    );
    assert_eq!(counters.dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn several_questions_in_a_row_each_resume_the_call() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let (keys, first) = asked(&c.call_with("wizard", json!({})).await);
    assert_eq!(keys, ["elicit-1"]);
    let r = c
        .call_with(
            "wizard",
            json!({"requestState": first, "inputResponses": {"elicit-1": accept("name", "Ada")}}),
        )
        .await;
    let (keys, second) = asked(&r);
    assert_eq!(keys, ["elicit-2"]);
    assert_ne!(first, second, "every round has its own state");
    let r = c
        .call_with(
            "wizard",
            json!({"requestState": second, "inputResponses": {"elicit-2": accept("color", "green")}}),
        )
        .await;
    assert_eq!(answered(&r), "Ada likes green");
    assert_eq!(
        counters.effects.load(Ordering::SeqCst),
        2,
        "each step before a question ran once"
    );
}

#[tokio::test]
async fn parallel_questions_come_together_and_a_partial_answer_keeps_the_rest_open() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let (keys, state) = asked(&c.call_with("parallel", json!({})).await);
    assert_eq!(keys, ["a", "b"]);
    let r = c
        .call_with(
            "parallel",
            json!({"requestState": state, "inputResponses": {
                "a": accept("first", "one"), "never-asked": accept("x", "y")}}),
        )
        .await;
    let (keys, state) = asked(&r);
    assert_eq!(keys, ["b"], "only the unanswered question is asked again");
    let r = c
        .call_with(
            "parallel",
            json!({"requestState": state, "inputResponses": {
                "a": accept("first", "ignored: already answered"), "b": accept("second", "two")}}),
        )
        .await;
    assert_eq!(answered(&r), "one two");
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_retry_without_answers_asks_again_and_loses_nothing() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let (_, state) = asked(&c.call_with("import", json!({})).await);
    let (keys, state) = asked(&c.call_with("import", json!({"requestState": state})).await);
    assert_eq!(keys, ["elicit-1"]);
    let r = c
        .call_with(
            "import",
            json!({"requestState": state, "inputResponses": {"elicit-1": accept("confirm", "ok")}}),
        )
        .await;
    assert_eq!(answered(&r), "imported: ok");
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_replayed_or_superseded_state_resumes_nothing() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let (_, first) = asked(&c.call_with("wizard", json!({})).await);
    let round_one =
        json!({"requestState": first, "inputResponses": {"elicit-1": accept("name", "Ada")}});
    let (_, second) = asked(&c.call_with("wizard", round_one.clone()).await);

    let (code, message) = error(&c.call_with("wizard", round_one.clone()).await);
    assert_eq!(code, -32602);
    assert!(message.contains("already used"), "{message}");

    let round_two =
        json!({"requestState": second, "inputResponses": {"elicit-2": accept("color", "red")}});
    assert_eq!(
        answered(&c.call_with("wizard", round_two.clone()).await),
        "Ada likes red"
    );
    for replay in [round_one, round_two] {
        let (code, message) = error(&c.call_with("wizard", replay).await);
        assert_eq!(code, -32602);
        assert!(message.contains("already used"), "{message}");
    }
    assert_eq!(
        counters.effects.load(Ordering::SeqCst),
        2,
        "a replay never runs the tool again"
    );
}

#[tokio::test]
async fn a_tampered_state_or_a_malformed_answer_is_refused_and_the_call_still_waits() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let (_, state) = asked(&c.call_with("import", json!({})).await);
    let answer = json!({"elicit-1": accept("confirm", "yes")});
    let tampered = format!("{}-TAMPERED", state.as_str().unwrap());
    let (code, message) = error(
        &c.call_with(
            "import",
            json!({"requestState": tampered, "inputResponses": answer}),
        )
        .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("signature"), "{message}");
    let (code, _) = error(
        &c.call_with(
            "import",
            json!({"requestState": state, "inputResponses": answer, "arguments": {"other": 1}}),
        )
        .await,
    );
    assert_eq!(code, -32602, "a state is bound to its arguments");
    let (code, _) = error(
        &c.call_with(
            "wizard",
            json!({"requestState": state, "inputResponses": answer}),
        )
        .await,
    );
    assert_eq!(code, -32602, "a state is bound to its tool");
    let (code, message) = error(
        &c.call_with(
            "import",
            json!({"requestState": state, "inputResponses": {"elicit-1": 12345}}),
        )
        .await,
    );
    assert_eq!(code, -32602, "an input response is an object");
    assert!(message.contains("elicit-1"), "{message}");
    let r = c
        .call_with(
            "import",
            json!({"requestState": state, "inputResponses": answer}),
        )
        .await;
    assert_eq!(answered(&r), "imported: yes");
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_retries_has_its_call_cancelled_after_the_timeout() {
    let counters = Counters::default();
    let server = builder(&counters)
        .parked_call_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut c = client(&server);
    let (_, state) = asked(&c.call_with("import", json!({})).await);
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(counters.dropped.load(Ordering::SeqCst), 0, "still waiting");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        counters.cancelled.load(Ordering::SeqCst),
        1,
        "the tool saw its cancellation"
    );
    assert_eq!(counters.dropped.load(Ordering::SeqCst), 1);
    let (code, message) = error(
        &c.call_with(
            "import",
            json!({"requestState": state, "inputResponses": {"elicit-1": accept("confirm", "late")}}),
        )
        .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("interaction expired"), "{message}");
    assert_eq!(
        counters.effects.load(Ordering::SeqCst),
        1,
        "and it never runs again"
    );
}

#[tokio::test]
async fn a_lost_call_runs_again_only_when_its_tool_allows_it() {
    let counters = Counters::default();
    let before = builder(&counters).build().unwrap();
    let mut c = client(&before);
    let (_, import_state) = asked(&c.call_with("import", json!({})).await);
    let (_, first) = asked(&c.call_with("lookup", json!({})).await);
    let r = c
        .call_with(
            "lookup",
            json!({"requestState": first, "inputResponses": {"elicit-1": accept("first", "one")}}),
        )
        .await;
    let (keys, second) = asked(&r);
    assert_eq!(keys, ["elicit-2"]);
    assert_eq!(counters.lookups.load(Ordering::SeqCst), 1);

    // The server restarts (or another process with the same key gets the retries).
    drop(before);
    let mut c = client(&builder(&counters).build().unwrap());
    let (code, message) = error(
        &c.call_with(
            "import",
            json!({"requestState": import_state, "inputResponses": {"elicit-1": accept("confirm", "yes")}}),
        )
        .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("start over"), "{message}");
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);

    let r = c
        .call_with(
            "lookup",
            json!({"requestState": second, "inputResponses": {"elicit-2": accept("second", "two")}}),
        )
        .await;
    assert_eq!(
        answered(&r),
        "one two",
        "the rerun finds the answer of the earlier round in the state"
    );
    assert_eq!(counters.lookups.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_rotated_key_still_opens_its_states_until_it_leaves_the_ring() {
    const NEW: [u8; 32] = [43; 32];
    let counters = Counters::default();
    let mut before = client(&builder(&counters).build().unwrap());
    let (_, signed_by_old) = asked(&before.call_with("lookup", json!({})).await);

    // The key is rotated: the new one signs, the old one still opens.
    let rotated = builder(&counters)
        .request_state_keys([NEW, KEY])
        .build()
        .unwrap();
    let mut c = client(&rotated);
    let r = c
        .call_with(
            "lookup",
            json!({"requestState": signed_by_old, "inputResponses": {"elicit-1": accept("first", "one")}}),
        )
        .await;
    let (keys, signed_by_new) = asked(&r);
    assert_eq!(keys, ["elicit-2"]);

    // The old key leaves the ring: its states are refused, the new key's still open.
    let mut c = client(&builder(&counters).request_state_key(NEW).build().unwrap());
    let (code, message) = error(
        &c.call_with(
            "lookup",
            json!({"requestState": signed_by_old, "inputResponses": {"elicit-1": accept("first", "one")}}),
        )
        .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("signature"), "{message}");
    let r = c
        .call_with(
            "lookup",
            json!({"requestState": signed_by_new, "inputResponses": {"elicit-2": accept("second", "two")}}),
        )
        .await;
    assert_eq!(answered(&r), "one two");
}

#[tokio::test]
async fn parked_calls_are_bounded() {
    let counters = Counters::default();
    let server = builder(&counters).max_parked_calls(1).build().unwrap();
    let mut c = client(&server);
    let (_, parked) = asked(&c.call_with("import", json!({})).await);
    let (code, _) = error(&c.call_with("import", json!({})).await);
    assert_eq!(code, -32000, "no room to wait: the server is busy");
    eventually(&counters.dropped, 1, "that call is cancelled").await;

    // A tool that may run again still gets its question through, and reruns on the retry.
    let (keys, state) = asked(&c.call_with("lookup", json!({})).await);
    assert_eq!(keys, ["elicit-1"]);
    let r = c
        .call_with(
            "lookup",
            json!({"requestState": state, "inputResponses": {"elicit-1": accept("first", "one")}}),
        )
        .await;
    assert_eq!(asked(&r).0, ["elicit-2"]);
    assert_eq!(counters.lookups.load(Ordering::SeqCst), 2);

    let r = c
        .call_with(
            "import",
            json!({"requestState": parked, "inputResponses": {"elicit-1": accept("confirm", "yes")}}),
        )
        .await;
    assert_eq!(answered(&r), "imported: yes");
    assert_eq!(counters.effects.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn cancelling_a_retry_cancels_the_call() {
    let counters = Counters::default();
    let server = builder(&counters).build().unwrap();
    let mut c = client(&server);
    let (_, state) = asked(&c.call_with("slow_finish", json!({})).await);
    let retry = json!({"name": "slow_finish", "arguments": {}, "requestState": state,
        "inputResponses": {"elicit-1": accept("go", "now")}});
    let (id, message) = c.message("tools/call", retry.clone());
    let session = c.session.clone();
    let pending = tokio::spawn(async move { session.handle_text(&message).await });
    tokio::time::timeout(Duration::from_secs(10), counters.resumed.notified())
        .await
        .expect("the retry resumed the call");
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}});
    assert!(c.session.handle_text(&cancel.to_string()).await.is_none());
    let reply = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("the cancelled retry ends")
        .unwrap();
    assert!(reply.is_none(), "a cancelled request is not answered");
    assert_eq!(counters.cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(counters.dropped.load(Ordering::SeqCst), 1);
    let (code, _) = error(&c.request("tools/call", retry).await);
    assert_eq!(
        code, -32602,
        "the state of a cancelled call resumes nothing"
    );
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn prompts_and_resource_reads_are_resumed_too() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let r = c
        .request("prompts/get", json!({"name": "confirm_prompt"}))
        .await;
    let (keys, state) = asked(&r);
    let retry = json!({"name": "confirm_prompt", "requestState": state,
        "inputResponses": {keys[0].clone(): accept("topic", "rivers")}});
    let r = c.request("prompts/get", retry.clone()).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(
        r["result"]["messages"][0]["content"]["text"],
        "Write about rivers."
    );
    assert_eq!(error(&c.request("prompts/get", retry).await).0, -32602);

    let r = c
        .request("resources/read", json!({"uri": "test://ask"}))
        .await;
    let (keys, state) = asked(&r);
    let retry = json!({"uri": "test://ask", "requestState": state,
        "inputResponses": {keys[0].clone(): accept("who", "Ada")}});
    let r = c.request("resources/read", retry.clone()).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["contents"][0]["text"], "for Ada");
    assert_eq!(error(&c.request("resources/read", retry).await).0, -32602);
    assert_eq!(
        counters.effects.load(Ordering::SeqCst),
        2,
        "each handler ran once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_prelude_is_resumed_then_goes_on_as_a_task() {
    let counters = Counters::default();
    let mut c = Client::stateless(&builder(&counters).build().unwrap(), tasks_caps());
    let (keys, state) = asked(&c.call_with("prelude", json!({})).await);
    let r = c
        .call_with(
            "prelude",
            json!({"requestState": state, "inputResponses": {keys[0].clone(): accept("name", "Alice")}}),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    let mut status = Value::Null;
    for _ in 0..100 {
        status = c.request("tasks/get", json!({"taskId": id})).await;
        if status["result"]["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status["result"]["status"], "completed", "{status}");
    assert_eq!(
        status["result"]["result"]["content"][0]["text"],
        "Hello, Alice! (from a task)"
    );
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_resumed_call_reports_progress_to_the_retry() {
    let mut c = client(&builder(&Counters::default()).build().unwrap());
    let (_, state) = asked(
        &c.call_with("report_after", json!({"_meta": {"progressToken": "first"}}))
            .await,
    );
    let r = c
        .call_with(
            "report_after",
            json!({"_meta": {"progressToken": "second"}, "requestState": state,
                "inputResponses": {"elicit-1": accept("step", "one")}}),
        )
        .await;
    assert_eq!(answered(&r), "reported one");
    let mut tokens = Vec::new();
    while let Ok(message) = c.outbound.try_recv() {
        let message: Value = serde_json::from_str(&message).unwrap();
        assert_eq!(message["method"], "notifications/progress");
        tokens.push(message["params"]["progressToken"].clone());
    }
    assert_eq!(tokens, [json!("second")]);
}

#[tokio::test]
async fn a_lost_prompt_fails_and_a_lost_resource_read_reruns_by_their_policy() {
    let counters = Counters::default();
    let before = builder(&counters).build().unwrap();
    let mut c = client(&before);
    let (keys, prompt_state) = asked(
        &c.request("prompts/get", json!({"name": "confirm_prompt"}))
            .await,
    );
    let prompt_retry = json!({"name": "confirm_prompt", "requestState": prompt_state,
        "inputResponses": {keys[0].clone(): accept("topic", "rivers")}});
    let (keys, read_state) = asked(
        &c.request("resources/read", json!({"uri": "test://lookup"}))
            .await,
    );
    let read_retry = json!({"uri": "test://lookup", "requestState": read_state,
        "inputResponses": {keys[0].clone(): accept("who", "Ada")}});

    drop(before);
    let mut c = client(&builder(&counters).build().unwrap());
    let (code, message) = error(&c.request("prompts/get", prompt_retry).await);
    assert_eq!(code, -32602);
    assert!(message.contains("interaction expired"), "{message}");
    let r = c.request("resources/read", read_retry).await;
    assert_eq!(r["result"]["contents"][0]["text"], "found Ada", "{r}");
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
    assert_eq!(counters.lookups.load(Ordering::SeqCst), 2);
}

/// A retry whose answer does not match the question's `requestedSchema` is refused with
/// `-32602` naming the field, and the call stays parked: the same state with a good answer
/// still resumes it, and the tool ran its side effect once and saw only the good answer.
#[tokio::test]
async fn an_answer_that_does_not_fit_is_refused_and_the_call_waits_for_a_good_one() {
    let counters = Counters::default();
    let mut c = client(&builder(&counters).build().unwrap());
    let (keys, state) = asked(&c.call_with("import", json!({})).await);
    assert_eq!(keys, ["elicit-1"]);
    let bad = json!({"action": "accept", "content": {"confirm": 7}});
    let r = c
        .call_with(
            "import",
            json!({"requestState": state, "inputResponses": {"elicit-1": bad}}),
        )
        .await;
    let (code, message) = error(&r);
    assert_eq!(code, -32602, "{r}");
    assert!(
        message.contains("elicit-1") && message.contains("/confirm"),
        "{message}"
    );
    let r = c
        .call_with(
            "import",
            json!({"requestState": state, "inputResponses": {"elicit-1": accept("confirm", "yes")}}),
        )
        .await;
    assert_eq!(answered(&r), "imported: yes");
    assert_eq!(counters.effects.load(Ordering::SeqCst), 1);
}
