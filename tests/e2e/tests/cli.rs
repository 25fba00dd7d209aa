//! The `mcp-tasks` command line against the conformance fixture served over HTTP: exit codes
//! and `--json` output, resuming after the client was killed, and a real terminal (a
//! pseudo-terminal) with its progress bar, a question typed in, and Ctrl-C.

mod support;

use expectrl::{ControlCode, Eof, Regex, Session, WaitStatus};
use mcp_tasks::client::HandleStore;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The bound on every wait of these tests.
const WITHIN: Duration = Duration::from_secs(30);

/// A fixture process serving HTTP on a free port with tasks in memory.
struct Fixture {
    child: Child,
    url: String,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fixture() -> Fixture {
    let mut child = Command::new(support::example("conformance-server"))
        .args(["--http", "127.0.0.1:0", "--store", "memory"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the conformance server");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening on ").map(str::to_owned))
        .expect("the fixture says where it listens");
    std::thread::spawn(move || lines.for_each(drop));
    Fixture { child, url }
}

/// A private handle store directory for one test.
fn home(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cli(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mcp-tasks-cli"));
    c.env("MCP_TASKS_HOME", home).stdin(Stdio::null());
    c
}

fn run(home: &Path, args: &[&str]) -> Output {
    let out = cli(home).args(args).output().expect("run mcp-tasks");
    eprintln!(
        "mcp-tasks {args:?} -> {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn exit_codes_and_json_output_tell_outcomes_apart() {
    let f = fixture();
    let home = home("codes");
    let url = f.url.as_str();

    let out = run(
        &home,
        &["--url", url, "call", "greet", "name=Ada", "--json"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout_json(&out)["result"]["content"][0]["text"],
        "Hello, Ada!"
    );

    let out = run(
        &home,
        &["--url", url, "call", "slow_compute", "seconds=1", "--json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let done = stdout_json(&out);
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "compute finished after 1 s"
    );

    let out = run(
        &home,
        &[
            "--url",
            url,
            "--era",
            "2025-11-25",
            "call",
            "slow_compute",
            r#"{"seconds": 1, "label": "old"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "old finished after 1 s\n"
    );

    let out = run(&home, &["--url", url, "call", "failing_job"]);
    assert_eq!(out.status.code(), Some(1), "a tool error fails the call");

    let out = run(
        &home,
        &["--url", url, "call", "slow_compute", "seconds=abc"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`seconds` must be an integer, not `abc`")
    );

    let out = run(
        &home,
        &["--url", url, "call", "confirm_delete", "--no-input"],
    );
    assert_eq!(out.status.code(), Some(4), "a question with nobody to ask");

    let out = run(&home, &["--stdio", "/nonexistent/server", "tools"]);
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("check the command and your PATH"));

    let out = run(&home, &["--url", "http://127.0.0.1:9/mcp", "tools"]);
    assert_eq!(out.status.code(), Some(5));

    // Past the deadline the call leaves the task running; it is then known by its id alone.
    let out = run(
        &home,
        &[
            "--url",
            url,
            "call",
            "slow_compute",
            "seconds=60",
            "--timeout",
            "0.5",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(6));
    let store = HandleStore::open(home.join("handles.db")).unwrap();
    let mut running = store.list(None, true).unwrap();
    // The question of `--no-input` is waiting too.
    running.retain(|h| h.tool == "slow_compute");
    assert_eq!(running.len(), 1, "{running:?}");
    let id = running[0].task_id.clone();
    assert_eq!(run(&home, &["tasks", "cancel", &id]).status.code(), Some(0));
    let out = run(&home, &["tasks", "watch", &id, "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout_json(&out)["status"], "cancelled");

    let out = run(&home, &["--url", url, "tasks", "get", "no-such-task"]);
    assert_eq!(out.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expired"));

    let out = run(&home, &["--url", url, "tools", "--json"]);
    let tools = stdout_json(&out);
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "slow_compute")
    );

    let out = run(&home, &["tasks", "list", "--json"]);
    let handles = stdout_json(&out);
    assert!(handles.as_array().unwrap().len() >= 4, "{handles}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn no_input_leaves_the_question_to_tasks_watch_in_both_eras() {
    let f = fixture();
    let home = home("no-input");
    for (era, answer, said) in [("2026-07-28", "y", "deleted"), ("2025-11-25", "n", "kept")] {
        let file = format!("{era}.txt");
        let out = run(
            &home,
            &[
                "--url",
                &f.url,
                "--era",
                era,
                "call",
                "confirm_delete",
                &format!("filename={file}"),
                "--no-input",
            ],
        );
        assert_eq!(out.status.code(), Some(4), "{era}: input needed");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let id = stderr
            .split("answer it in a terminal with `mcp-tasks tasks watch ")
            .nth(1)
            .and_then(|rest| rest.split('`').next())
            .unwrap_or_else(|| panic!("{era}: says how to answer later: {stderr}"))
            .to_owned();

        // The task was not failed: it waits for its answer.
        let got = run(&home, &["tasks", "get", &id, "--json"]);
        assert_eq!(stdout_json(&got)["status"], "input_required", "{era}");

        // Later, in a terminal, by its id alone.
        let mut s = terminal(&home, &["tasks", "watch", &id]);
        s.expect(format!("Delete {file}?").as_str())
            .expect("the question, asked again");
        s.expect("confirm").expect("the field");
        s.send(answer).unwrap();
        s.expect(format!("{said} {file}").as_str())
            .expect("the answer reached the tool");
        s.expect(Eof).unwrap();
        assert_eq!(exit_code(&s), 0, "{era}");
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn resume_after_the_client_was_killed_finishes_the_same_task_without_calling_again() {
    let f = fixture();
    let home = home("resume");
    let mut client = cli(&home)
        .args([
            "--url",
            &f.url,
            "call",
            "durable_sleep",
            "seconds=3",
            "label=once",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let store = HandleStore::open(home.join("handles.db")).unwrap();
    let start = Instant::now();
    let handle = loop {
        if let Some(h) = store.list(None, false).unwrap().pop() {
            break h;
        }
        assert!(start.elapsed() < WITHIN, "the call never made a task");
        std::thread::sleep(Duration::from_millis(20));
    };
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(!handle.finished);

    let out = run(&home, &["tasks", "resume", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let done = stdout_json(&out);
    assert_eq!(done["taskId"], handle.task_id.as_str());
    assert_eq!(done["result"]["content"][0]["text"], "slept 3s: once");
    let all = store.list(None, false).unwrap();
    assert_eq!(all.len(), 1, "one call, one task: {all:?}");
    assert!(all[0].finished && all[0].status == "completed");
    assert_eq!(all[0].tool, "durable_sleep");
    let out = run(&home, &["tasks", "resume"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no unfinished tasks"));
    let _ = std::fs::remove_dir_all(&home);
}

/// A pseudo-terminal session whose output is echoed to the test's stderr, so that a
/// failure shows what the terminal showed.
type Terminal = Session<
    expectrl::session::OsProcess,
    expectrl::stream::log::LogStream<expectrl::session::OsProcessStream, std::io::Stderr>,
>;

fn terminal(home: &Path, args: &[&str]) -> Terminal {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mcp-tasks-cli"));
    c.env("MCP_TASKS_HOME", home)
        .env("TERM", "xterm")
        .args(args);
    let s = Session::spawn(c).expect("spawn mcp-tasks in a pseudo-terminal");
    let mut s = expectrl::session::log(s, std::io::stderr()).unwrap();
    s.set_expect_timeout(Some(WITHIN));
    s
}

fn exit_code(s: &Terminal) -> i32 {
    match s.get_process().wait().unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("mcp-tasks did not exit: {other:?}"),
    }
}

/// Waits for `text`; where the program ended instead, says how it ended (a signal or an
/// exit code), which the terminal alone does not show.
fn asks(s: &mut Terminal, text: &str, what: &str) {
    if let Err(e) = s.expect(text) {
        let ended = s.get_process().wait();
        panic!("{what}: {e:?}; the program: {ended:?}");
    }
}

#[test]
fn in_a_terminal_a_progress_bar_runs_a_question_is_typed_and_ctrl_c_cancels() {
    let f = fixture();
    let home = home("tty");

    let mut s = terminal(
        &home,
        &["--url", &f.url, "call", "slow_compute", "seconds=2"],
    );
    s.expect(Regex(r"working: 1/2 s"))
        .expect("the bar shows the status message");
    s.expect("finished after 2 s").expect("the result");
    s.expect(Eof).unwrap();
    assert_eq!(exit_code(&s), 0);

    // Both eras draw the bar: 2025-11-25 from progress notifications, 2026-07-28 (which has
    // no progress for tasks) from the `done/total` its status message starts with.
    for era in ["2026-07-28", "2025-11-25"] {
        let mut s = terminal(
            &home,
            &[
                "--url",
                &f.url,
                "--era",
                era,
                "call",
                "slow_compute",
                "seconds=2",
            ],
        );
        if let Err(e) = s.expect(Regex(r"[█░]{30} 1/2 ")) {
            panic!("{era}: no progress bar at 1/2: {e:?}");
        }
        s.expect("finished after 2 s").expect("the result");
        s.expect(Eof).unwrap();
        assert_eq!(exit_code(&s), 0);
    }

    let mut s = terminal(
        &home,
        &[
            "--url",
            &f.url,
            "call",
            "confirm_delete",
            "filename=notes.txt",
        ],
    );
    s.expect("Delete notes.txt?").expect("the question");
    s.expect("confirm").expect("the field");
    s.send("y").unwrap();
    s.expect("deleted notes.txt")
        .expect("the answer reached the tool");
    s.expect(Eof).unwrap();
    assert_eq!(exit_code(&s), 0);

    let mut s = terminal(
        &home,
        &["--url", &f.url, "call", "slow_compute", "seconds=60"],
    );
    s.expect("working").expect("the task runs");
    s.send(ControlCode::EndOfText).unwrap();
    asks(&mut s, "cancel the task, or detach", "Ctrl-C asks");
    s.send("\r").unwrap();
    s.expect("task cancelled").expect("the task was cancelled");
    s.expect(Eof).unwrap();
    assert_eq!(exit_code(&s), 3);

    // 2025-11-25 asks through a server request; the answer typed is "no".
    let mut s = terminal(
        &home,
        &[
            "--url",
            &f.url,
            "--era",
            "2025-11-25",
            "call",
            "confirm_delete",
            "filename=old.txt",
        ],
    );
    s.expect("Delete old.txt?").expect("the question");
    s.expect("confirm").expect("the field");
    s.send("n").unwrap();
    s.expect("kept old.txt")
        .expect("the answer reached the tool");
    s.expect(Eof).unwrap();
    assert_eq!(exit_code(&s), 0);

    // Ctrl-C, then "detach": the task keeps running and can be cancelled later by id.
    let mut s = terminal(
        &home,
        &["--url", &f.url, "call", "slow_compute", "seconds=60"],
    );
    let started = s
        .expect(Regex("task ([0-9a-f-]{36}) started"))
        .expect("the task id");
    let id = String::from_utf8(started.get(1).unwrap().to_vec()).unwrap();
    s.expect("working").expect("the task runs");
    s.send(ControlCode::EndOfText).unwrap();
    asks(&mut s, "cancel the task, or detach", "Ctrl-C asks");
    s.send("\x1b[B").unwrap();
    s.send("\r").unwrap();
    s.expect(format!("detached: task {id} keeps running").as_str())
        .expect("detached");
    s.expect(Eof).unwrap();
    assert_eq!(exit_code(&s), 6);
    let out = run(&home, &["tasks", "get", &id, "--json"]);
    assert_eq!(stdout_json(&out)["status"], "working");
    assert_eq!(run(&home, &["tasks", "cancel", &id]).status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&home);
}
