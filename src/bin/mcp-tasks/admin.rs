//! `mcp-tasks admin`: an operator's commands against a server's admin API (`--url` of the
//! console, e.g. `http://127.0.0.1:3000/admin`, and its token), or read-only straight
//! against a task store (`--task-store`).

use crate::{CONNECTION, Context, FAILED, Failure, UNKNOWN_TASK, USAGE};
use clap::{Args, Subcommand};
use mcp_tasks::CallOutcome;
use mcp_tasks::store::TaskFilter;
use mcp_tasks::task::{TaskRecord, TaskStatus};
use mcp_tasks::{Tasks, Viewer};
use serde_json::{Value, json};

/// The environment variable the admin token may come from.
const TOKEN_ENV: &str = "MCP_TASKS_ADMIN_TOKEN";

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The admin token (default: $MCP_TASKS_ADMIN_TOKEN); `--url` is then the console's
    /// URL, e.g. http://127.0.0.1:3000/admin.
    #[arg(long, value_name = "TOKEN")]
    admin_token: Option<String>,
    /// Read straight from this task store instead (list and get only): a SQLite file,
    /// postgres://... or redis://...
    #[arg(long, value_name = "URL")]
    task_store: Option<String>,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// List tasks of every owner, newest first.
    List {
        /// Only tasks of these statuses (working, input_required, completed, failed,
        /// cancelled); repeat or separate with commas.
        #[arg(long, value_delimiter = ',')]
        status: Vec<String>,
        /// Only tasks of this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Only tasks of this owner (`principal:SUBJECT` or `session:ID`).
        #[arg(long)]
        owner: Option<String>,
        /// Only tasks created since this long ago (`15m`, `2h`) or this RFC 3339 time.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// At most this many tasks.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Start after this cursor (from an earlier `--json` list).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show a task: its record, arguments, result or error, questions and lease.
    Get {
        /// The task id.
        id: String,
    },
    /// Cancel a task, whoever owns it.
    Cancel {
        /// The task id.
        id: String,
    },
    /// Run a finished task's tool again with its arguments.
    Rerun {
        /// The task id.
        id: String,
    },
    /// Pause a tool: no new task of it starts.
    Pause {
        /// The tool.
        tool: String,
    },
    /// Resume a paused tool.
    Resume {
        /// The tool.
        tool: String,
    },
    /// Drain the server: it starts no new task and finishes those it runs.
    Drain {
        /// Undo a drain: start new tasks again.
        #[arg(long)]
        undo: bool,
    },
}

pub async fn run(cx: &Context, args: &AdminArgs) -> Result<u8, Failure> {
    let json = cx.cli.json;
    if let Some(url) = &args.task_store {
        let tasks = Tasks::open_read_only(url)
            .await
            .map_err(|e| Failure(USAGE, e.to_string()))?;
        return read_only(&tasks, &args.command, json).await;
    }
    let Some(base) = cx.cli.server.url.as_deref() else {
        return Err(Failure(
            USAGE,
            "give the console's --url (http://HOST:PORT/admin) and an admin token, or --task-store URL".into(),
        ));
    };
    let token = args
        .admin_token
        .clone()
        .or_else(|| std::env::var(TOKEN_ENV).ok())
        .ok_or_else(|| {
            Failure(
                USAGE,
                format!("the admin API needs a token: --admin-token or ${TOKEN_ENV}"),
            )
        })?;
    let api = Api {
        base: format!("{}/api", base.trim_end_matches('/')),
        token,
        http: reqwest::Client::new(),
    };
    let answer = match &args.command {
        AdminCommand::List {
            status,
            tool,
            owner,
            since,
            limit,
            cursor,
        } => {
            let mut query = vec![("limit", limit.to_string())];
            if !status.is_empty() {
                query.push(("status", status.join(",")));
            }
            for (key, value) in [
                ("tool", tool),
                ("owner", owner),
                ("createdAfter", since),
                ("cursor", cursor),
            ] {
                if let Some(v) = value {
                    query.push((key, v.clone()));
                }
            }
            let page = api.get("/tasks", &query).await?;
            print_list(&page, json);
            return Ok(0);
        }
        AdminCommand::Get { id } => {
            let task = api.get(&format!("/tasks/{}", segment(id)), &[]).await?;
            print_task(&task, json);
            return Ok(0);
        }
        AdminCommand::Cancel { id } => api.post(&format!("/tasks/{}/cancel", segment(id))).await?,
        AdminCommand::Rerun { id } => api.post(&format!("/tasks/{}/rerun", segment(id))).await?,
        AdminCommand::Pause { tool } => {
            api.post(&format!("/tools/{}/pause", segment(tool))).await?
        }
        AdminCommand::Resume { tool } => {
            api.post(&format!("/tools/{}/resume", segment(tool)))
                .await?
        }
        AdminCommand::Drain { undo: false } => api.post("/drain").await?,
        AdminCommand::Drain { undo: true } => api.post("/undrain").await?,
    };
    if json {
        println!("{answer}");
    } else if let Some(task) = answer.get("task") {
        let what = match &args.command {
            AdminCommand::Rerun { .. } => "rerun as",
            _ if answer["cancelled"] == false => "already ended:",
            _ => "cancelled:",
        };
        println!(
            "{what} {} ({}, {})",
            task["taskId"].as_str().unwrap_or_default(),
            task["tool"].as_str().unwrap_or_default(),
            task["status"].as_str().unwrap_or_default()
        );
    } else {
        let paused: Vec<&str> = answer["paused"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        println!(
            "paused tools: {}; draining: {}",
            if paused.is_empty() {
                "none".into()
            } else {
                paused.join(", ")
            },
            answer["draining"]
        );
    }
    Ok(0)
}

/// A path segment, percent-encoded.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Failure> {
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", segment(v)))
            .collect();
        let url = if query.is_empty() {
            format!("{}{path}", self.base)
        } else {
            format!("{}{path}?{}", self.base, query.join("&"))
        };
        let request = self.http.get(url).bearer_auth(&self.token);
        answer(request.send().await).await
    }

    async fn post(&self, path: &str) -> Result<Value, Failure> {
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("x-mcp-tasks-admin", "1")
            .header("content-type", "application/json")
            .body("{}");
        answer(request.send().await).await
    }
}

async fn answer(sent: Result<reqwest::Response, reqwest::Error>) -> Result<Value, Failure> {
    let response =
        sent.map_err(|e| Failure(CONNECTION, format!("cannot reach the admin API: {e}")))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| Failure(CONNECTION, format!("the admin API's answer was cut: {e}")))?;
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if status.is_success() {
        return Ok(body);
    }
    let message = body["error"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_owned);
    let code = match status.as_u16() {
        404 => UNKNOWN_TASK,
        400 | 401 | 403 => USAGE,
        _ => FAILED,
    };
    Err(Failure(
        code,
        format!("the admin API answered {status}: {message}"),
    ))
}

/// `list` and `get` straight from a store.
async fn read_only(tasks: &Tasks, command: &AdminCommand, json: bool) -> Result<u8, Failure> {
    let viewer = Viewer::admin("mcp-tasks admin");
    let failed = |e: mcp_tasks::Error| Failure(FAILED, e.to_string());
    match command {
        AdminCommand::List {
            status,
            tool,
            owner,
            since,
            limit,
            cursor,
        } => {
            let mut filter = TaskFilter::new();
            for name in status {
                let status: TaskStatus = name
                    .parse()
                    .map_err(|_| Failure(USAGE, format!("{name:?} is not a task status")))?;
                filter = filter.status(status);
            }
            filter.tool = tool.clone();
            filter.owner = owner.clone();
            if let Some(since) = since {
                filter = filter.created_after(instant(since)?);
            }
            let page = tasks
                .list(&viewer, &filter, cursor.as_deref(), *limit)
                .await
                .map_err(failed)?;
            let list = json!({
                "tasks": page.tasks.iter().map(summary).collect::<Vec<_>>(),
                "nextCursor": page.next_cursor,
            });
            print_list(&list, json);
            Ok(0)
        }
        AdminCommand::Get { id } => match tasks.get(&viewer, id).await.map_err(failed)? {
            Some(rec) => {
                print_task(&detail(&rec), json);
                Ok(0)
            }
            None => Err(Failure(UNKNOWN_TASK, format!("no task {id} in the store"))),
        },
        _ => Err(Failure(
            USAGE,
            "a task store is read here, never changed: cancel, rerun, pause, resume and drain need the console's --url and token".into(),
        )),
    }
}

fn instant(text: &str) -> Result<std::time::SystemTime, Failure> {
    if let Ok(at) = humantime::parse_rfc3339_weak(text) {
        return Ok(at);
    }
    humantime::parse_duration(text)
        .ok()
        .and_then(|ago| std::time::SystemTime::now().checked_sub(ago))
        .ok_or_else(|| {
            Failure(
                USAGE,
                format!("--since takes 15m, 2h or an RFC 3339 time, not {text:?}"),
            )
        })
}

fn time(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// A task as the admin API lists it.
fn summary(rec: &TaskRecord) -> Value {
    json!({
        "taskId": rec.id,
        "status": rec.status.as_str(),
        "tool": rec.tool,
        "owner": rec.owner,
        "statusMessage": rec.status_message,
        "createdAt": time(rec.created_at),
        "updatedAt": time(rec.updated_at),
        "version": rec.version,
        "epoch": rec.epoch,
        "lease": rec.lease.as_ref().map(|l| json!({"worker": l.worker, "until": time(l.until)})),
        "openQuestions": rec.input_requests.len(),
    })
}

/// A task as the admin API shows it (the part a store holds).
fn detail(rec: &TaskRecord) -> Value {
    let mut value = summary(rec);
    value["arguments"] = Value::Object(rec.arguments.clone());
    value["outcome"] = match rec.outcome.as_deref() {
        Some(CallOutcome::Result(r)) => json!({ "result": r }),
        Some(CallOutcome::Error(e)) => json!({ "error": e }),
        _ => Value::Null,
    };
    value["questions"] = rec
        .input_requests
        .iter()
        .map(|(key, q)| json!({"key": key, "method": q.method, "params": q.params}))
        .collect();
    value
}

fn print_list(page: &Value, json: bool) {
    if json {
        println!("{page}");
        return;
    }
    let tasks = page["tasks"].as_array().cloned().unwrap_or_default();
    let rows: Vec<[String; 6]> = tasks
        .iter()
        .map(|t| {
            let text = |k: &str| t[k].as_str().unwrap_or("-").to_owned();
            [
                text("taskId"),
                text("status"),
                text("tool"),
                text("owner"),
                text("updatedAt"),
                t["statusMessage"].as_str().unwrap_or("").to_owned(),
            ]
        })
        .collect();
    let header = ["TASK", "STATUS", "TOOL", "OWNER", "UPDATED", "MESSAGE"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    if let Some(next) = page["nextCursor"].as_str() {
        println!("(more: --cursor {next})");
    }
}

fn print_task(task: &Value, json: bool) {
    if json {
        println!("{task}");
        return;
    }
    if let Some(fields) = task.as_object() {
        for (key, value) in fields {
            match value {
                Value::String(s) => println!("{key}: {s}"),
                Value::Null => {}
                other => println!("{key}: {other}"),
            }
        }
    }
}
