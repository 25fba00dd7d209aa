//! Unit tests of connections: their outbound channels and their requests in flight.

use super::*;
use std::time::Duration;

fn progress(n: u64) -> Value {
    serde_json::json!({ "progressToken": "p", "progress": n })
}

fn log(n: u64) -> Value {
    serde_json::json!({ "level": "info", "data": n })
}

fn read(rx: &mut mpsc::Receiver<String>) -> Vec<Value> {
    std::iter::from_fn(|| rx.try_recv().ok())
        .map(|m| serde_json::from_str::<Value>(&m).unwrap()["params"].clone())
        .collect()
}

#[test]
fn log_lines_are_dropped_and_counted_while_the_channel_is_full() {
    let (tx, mut rx) = mpsc::channel(2);
    let sink = Sink::new(tx);
    let sent: Vec<bool> = (0..5)
        .map(|n| sink.notify_droppable("notifications/message", log(n)))
        .collect();
    assert_eq!(sent, [true, true, false, false, false]);
    assert_eq!(sink.dropped(), 3);
    assert!(sink.dropped.in_burst.load(Ordering::Acquire));
    // The queue holds what fitted, in order; nothing grew past the capacity.
    assert_eq!(rx.len(), 2);
    assert_eq!(read(&mut rx)[0]["data"], 0);
    // Room again: the next one goes and the burst is over (its next drop is logged).
    assert!(sink.notify_droppable("notifications/message", log(5)));
    assert!(!sink.dropped.in_burst.load(Ordering::Acquire));
    assert_eq!(sink.dropped(), 3);
    // The sinks of a connection's streams share its count.
    let (stream_tx, _stream_rx) = mpsc::channel(1);
    let stream = sink.beside(stream_tx);
    assert!(stream.notify_droppable("notifications/message", json_null()));
    assert!(!stream.notify_droppable("notifications/message", json_null()));
    assert_eq!(sink.dropped(), 4);
}

fn progress_of(token: &str, n: u64) -> Value {
    serde_json::json!({ "progressToken": token, "progress": n })
}

/// Sends `params`, a progress notification, coalesced under its token.
fn latest(sink: &Sink, params: Value) -> bool {
    let key = progress_key(&params["progressToken"]);
    sink.notify_latest(key, "notifications/progress", params)
}

fn status(task: &str, status: &str) -> Value {
    serde_json::json!({ "taskId": task, "status": status })
}

#[tokio::test(start_paused = true)]
async fn progress_and_task_status_keep_their_latest_for_a_client_that_catches_up() {
    let (tx, mut rx) = mpsc::channel(2);
    let sink = Sink::new(tx);
    for n in 0..5 {
        assert!(latest(&sink, progress_of("p", n)));
    }
    for n in 0..3 {
        assert!(latest(&sink, progress_of("q", n)));
    }
    for s in ["working", "input_required", "working"] {
        assert!(sink.notify_latest(
            "task:t".into(),
            "notifications/tasks/status",
            status("t", s)
        ));
    }
    assert!(!sink.notify_droppable("notifications/message", log(0)));
    // p0 and p1 fitted; p2, p3 and q0, q1 and the first two statuses were replaced by
    // later ones of their key; the log line was dropped.
    assert_eq!(sink.dropped(), 2 + 2 + 2 + 1);
    assert_eq!(rx.len(), 2);
    // The client reads: the latest of each key follows, oldest key first.
    let mut got = Vec::new();
    while got.len() < 5 {
        let m: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        got.push(m["params"].clone());
    }
    assert_eq!(
        got,
        [
            progress_of("p", 0),
            progress_of("p", 1),
            progress_of("p", 4),
            progress_of("q", 2),
            status("t", "working"),
        ]
    );
    tokio::task::yield_now().await;
    assert!(rx.try_recv().is_err(), "nothing else was held");
    assert!(!sink.held.locked().flushing);
    assert!(!sink.dropped.in_burst.load(Ordering::Acquire));
    // Caught up: the next ones go straight through.
    assert!(latest(&sink, progress_of("p", 5)));
    assert_eq!(read(&mut rx), [progress_of("p", 5)]);
    assert_eq!(sink.dropped(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_settled_token_sends_what_it_held_if_it_fits_and_nothing_later() {
    let (tx, mut rx) = mpsc::channel(1);
    let sink = Sink::new(tx);
    let key = progress_key(&Value::from("p"));
    assert!(latest(&sink, progress_of("p", 0)));
    assert!(latest(&sink, progress_of("p", 1)));
    // Still full as the request ends: its held progress is dropped, not sent later.
    sink.settle(&key);
    assert_eq!(sink.dropped(), 1);
    assert_eq!(read(&mut rx), [progress_of("p", 0)]);
    tokio::task::yield_now().await;
    assert!(rx.try_recv().is_err(), "nothing follows a settled token");

    assert!(latest(&sink, progress_of("q", 0)));
    assert!(latest(&sink, progress_of("q", 1)));
    // Room as the request ends: its held progress goes at once.
    assert_eq!(read(&mut rx), [progress_of("q", 0)]);
    sink.settle(&progress_key(&Value::from("q")));
    assert_eq!(read(&mut rx), [progress_of("q", 1)]);
    assert_eq!(sink.dropped(), 1);
    // Settling a token with nothing held does nothing.
    sink.settle(&key);
    assert!(rx.try_recv().is_err());
}

#[test]
fn without_a_runtime_what_is_held_goes_with_the_next_notification_that_fits() {
    let (tx, mut rx) = mpsc::channel(1);
    let sink = Sink::new(tx);
    assert!(latest(&sink, progress_of("p", 0)));
    assert!(latest(&sink, progress_of("p", 1)));
    assert_eq!(read(&mut rx), [progress_of("p", 0)]);
    assert!(latest(&sink, progress_of("q", 0)));
    assert_eq!(read(&mut rx), [progress_of("p", 1)]);
    assert!(read(&mut rx).is_empty(), "q0 is held now");
    assert!(latest(&sink, progress_of("q", 1)));
    assert_eq!(read(&mut rx), [progress_of("q", 0)], "q1 is held now");
    assert_eq!(sink.dropped(), 0, "each went, none was replaced");
    sink.settle(&progress_key(&Value::from("q")));
    assert_eq!(read(&mut rx), [progress_of("q", 1)]);
}

#[tokio::test(start_paused = true)]
async fn what_is_held_for_a_reader_that_left_is_let_go() {
    let (tx, rx) = mpsc::channel(1);
    let sink = Sink::new(tx);
    assert!(latest(&sink, progress_of("p", 0)));
    assert!(latest(&sink, progress_of("p", 1)));
    assert!(sink.held.locked().flushing);
    drop(rx);
    tokio::task::yield_now().await;
    let held = sink.held.locked();
    assert!(held.latest.is_empty() && !held.flushing);
}

fn json_null() -> Value {
    serde_json::json!({ "level": "info", "data": null })
}

#[tokio::test(start_paused = true)]
async fn a_message_that_must_not_be_lost_waits_for_room_and_goes_once_read() {
    let (tx, mut rx) = mpsc::channel(1);
    let sink = Sink::new(tx);
    assert!(sink.send_text("first".into()).await);
    let waiting = tokio::spawn({
        let sink = sink.clone();
        async move { sink.send_text("second".into()).await }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !waiting.is_finished(),
        "the send waits while the client does not read"
    );
    assert_eq!(rx.recv().await.as_deref(), Some("first"));
    assert!(waiting.await.unwrap());
    assert_eq!(rx.recv().await.as_deref(), Some("second"));
    assert_eq!(sink.dropped(), 0);
}

/// Fills `sink`'s channel of one message, then sends one more, which waits for room.
async fn a_send_waiting_for_room(sink: &Sink) -> tokio::task::JoinHandle<bool> {
    assert!(sink.send_text("fills it".into()).await);
    let waiting = tokio::spawn({
        let sink = sink.clone();
        async move { sink.send_text("waits".into()).await }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!waiting.is_finished());
    waiting
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_closes_ends_every_wait_for_room() {
    let (tx, _rx) = mpsc::channel(1);
    let conn = Connection::new(Sink::new(tx), None, None);
    let waiting = a_send_waiting_for_room(&conn.sink).await;
    conn.cancel_all();
    let sent = tokio::time::timeout(Duration::from_secs(1), waiting).await;
    assert!(!sent.expect("the wait ends with the connection").unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_is_gone_fails_every_send_at_once() {
    let (tx, rx) = mpsc::channel(1);
    let sink = Sink::new(tx);
    drop(rx);
    assert!(sink.is_closed());
    assert!(!sink.send_text("lost".into()).await);
    assert!(
        !sink
            .notify("notifications/cancelled", serde_json::json!({}))
            .await
    );
    assert!(!latest(&sink, progress(1)));
    // Nobody was there to tell: not a drop for a slow client.
    assert_eq!(sink.dropped(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_server_request_waiting_for_room_ends_when_its_call_is_cancelled() {
    let (tx, mut rx) = mpsc::channel(1);
    let conn = Connection::new(Sink::new(tx), None, None);
    assert!(conn.sink.send_text("fills it".into()).await);
    let cancel = CancellationToken::new();
    let asked = tokio::spawn({
        let (conn, cancel) = (Arc::clone(&conn), cancel.clone());
        async move {
            let sink = conn.sink.clone();
            conn.request(&sink, "elicitation/create", serde_json::json!({}), &cancel)
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!asked.is_finished());
    cancel.cancel();
    assert_eq!(asked.await.unwrap(), Err(RequestAborted::Cancelled));
    // The request never went out, and nothing waits for its answer.
    assert_eq!(rx.recv().await.as_deref(), Some("fills it"));
    assert!(rx.try_recv().is_err());
    assert!(conn.pending.locked().is_empty());
}

#[test]
fn requests_in_flight_are_found_by_id_however_many_there_are() {
    let (tx, _rx) = mpsc::channel(1);
    let conn = Connection::new(Sink::new(tx), None, None);
    let (one, two, three) = (
        RequestId::from(1),
        RequestId::from("two"),
        RequestId::from(3),
    );
    let first = conn.begin(&one).expect("a new id");
    let second = conn.begin(&two).expect("a new id");
    assert!(conn.begin(&one).is_none(), "the id is in flight");
    assert!(conn.begin(&two).is_none(), "the id is in flight");
    // The first request ends: its id is free again, the second is still found.
    drop(first);
    let third = conn.begin(&three).expect("a new id");
    assert!(conn.begin(&two).is_none());
    let again = conn.begin(&one).expect("the first request's id is free");
    // Each id reaches its own request, and only it.
    conn.cancel(&two);
    assert!(second.is_cancelled());
    assert!(!third.is_cancelled() && !again.is_cancelled());
    let tracked = conn.track(&two);
    assert!(tracked.is_cancelled(), "the token of the request in flight");
    drop(tracked);
    assert!(
        conn.begin(&two).is_none(),
        "a guard that only looked removes nothing"
    );
    drop((second, third, again));
    for id in [&one, &two, &three] {
        assert!(conn.begin(id).is_some(), "every request ended");
    }
    assert!(!conn.is_closed());
}

#[cfg(feature = "http")]
#[tokio::test(start_paused = true)]
async fn cancelling_the_request_of_a_connection_made_for_it_closes_the_connection() {
    let (tx, _rx) = mpsc::channel(1);
    let conn = Connection::for_request(Sink::new(tx), None, None);
    let id = RequestId::from(7);
    let request = conn.begin(&id).expect("a new id");
    conn.cancel(&RequestId::from(8));
    assert!(!request.is_cancelled(), "another id is ignored");
    let waiting = a_send_waiting_for_room(&conn.sink).await;
    conn.cancel(&id);
    assert!(request.is_cancelled() && conn.is_closed());
    let sent = tokio::time::timeout(Duration::from_secs(1), waiting).await;
    assert!(!sent.expect("the wait ends with the request").unwrap());
}

#[test]
fn a_connection_names_the_owner_of_its_tasks_once_in_either_era() {
    let (tx, _rx) = mpsc::channel(1);
    let anonymous = Connection::new(Sink::new(tx.clone()), None, None);
    // Without a principal, a stateless request's task is owned by nobody.
    assert_eq!(anonymous.task_owner(false), None);
    let owner = anonymous.task_owner(true).unwrap();
    assert!(owner.starts_with("session:"), "{owner}");
    assert_eq!(owner, format!("session:{}", anonymous.id.get().unwrap()));
    // Named once: the same text, not a new one each time.
    assert!(std::ptr::eq(owner, anonymous.task_owner(true).unwrap()));
    assert_eq!(anonymous.task_owner(false), None);
    let principal = Arc::new(crate::principal::Principal::new("ada"));
    let signed_in = Connection::new(Sink::new(tx), Some(principal), None);
    assert_eq!(signed_in.task_owner(false), Some("principal:ada"));
    assert_eq!(signed_in.task_owner(true), Some("principal:ada"));
    // Another connection of no principal is another owner.
    let (tx, _rx) = mpsc::channel(1);
    let other = Connection::new(Sink::new(tx), None, None);
    assert_ne!(other.task_owner(true), anonymous.task_owner(true));
}

/// A request stream that ended empty with no sender of its own left is the next request's;
/// one that still holds a message, or whose request left a sender behind, is not, so
/// nothing one request sends can reach another's stream.
#[cfg(feature = "http")]
#[test]
fn only_a_stream_as_good_as_new_is_used_again() {
    let spares = SpareStreams::new(4);
    let first = spares.take();
    let sender = first.sender();
    sender.try_send("read".into()).unwrap();
    drop(sender);
    let mut first = first;
    assert_eq!(first.try_recv().unwrap(), "read");
    // A weak sender names the channel without counting as one of its senders.
    let probe = first.sender().downgrade();
    drop(first);
    let again = spares.take();
    let same = probe.upgrade().expect("kept as a spare");
    assert!(
        again.sender().same_channel(&same),
        "an empty stream is used again"
    );
    drop(same);

    // A message left unread: the stream is not kept.
    again.sender().try_send("left".into()).unwrap();
    let probe = again.sender().downgrade();
    drop(again);
    assert!(probe.upgrade().is_none(), "let go");
    let other = spares.take();

    // A sender the request left behind: not kept, and what it sends later reaches nobody.
    let straggler = other.sender();
    drop(other);
    let next = spares.take();
    assert!(!next.sender().same_channel(&straggler));
    assert!(
        straggler.try_send("late".into()).is_err(),
        "its receiver is gone"
    );
    assert!(next.is_empty());
}

/// The spares are bounded: streams dropped past the bound are let go.
#[cfg(feature = "http")]
#[test]
fn spare_streams_are_bounded() {
    let spares = SpareStreams::new(1);
    let streams: Vec<_> = (0..MAX_SPARE_STREAMS + 10).map(|_| spares.take()).collect();
    drop(streams);
    assert_eq!(spares.idle.locked().len(), MAX_SPARE_STREAMS);
}
