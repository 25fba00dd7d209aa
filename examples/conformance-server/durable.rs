//! Fixtures of durable steps and unique tools: `charge_then_mail` runs two steps that each
//! leave a line in an effects file (`MCP_TASKS_EFFECTS_FILE`), so a test that kills its
//! process between the steps can count, with `side_effects`, that the rerun did each step
//! once; `charge_now` charges at once, without a task; `reindex` is unique by its index;
//! `mark` and `mark_once` leave a `start KEY` line when their tool starts and a `done KEY`
//! line when it ends, so a test can count the runs of each task (`mark` reruns after a
//! restart, `mark_once` fails).

use mcp_tasks::prelude::*;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

/// The environment variable naming the file the steps append their effects to.
const EFFECTS_FILE: &str = "MCP_TASKS_EFFECTS_FILE";

/// Appends `line` to the effects file, whole, in one write, and syncs it to disk. Without
/// `MCP_TASKS_EFFECTS_FILE` there is no file and nothing is written.
async fn record_effect(line: String) -> Result<(), ToolError> {
    let Some(path) = std::env::var_os(EFFECTS_FILE) else {
        return Ok(());
    };
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        file.write_all(format!("{line}\n").as_bytes())?;
        file.sync_all()
    })
    .await
    .map_err(|e| ToolError::new(format!("the effects writer stopped: {e}")))??;
    Ok(())
}

/// Charges an order, then mails its receipt: two durable steps, each recorded in the effects
/// file, with a `between ORDER` line once the charge is stored (not a side effect: it marks
/// the pause between the steps, on every run). After a restart between them the task runs
/// again and only mails.
#[task_tool(mode = "required", poll_interval = "200ms", on_restart = "rerun")]
async fn charge_then_mail(
    #[arg(description = "The order to charge and mail.")] order: String,
    #[arg(description = "How long to wait between the two steps, in milliseconds (default 0).")]
    pause_ms: Option<u64>,
    steps: Steps,
) -> Result<String, ToolError> {
    let receipt: String = steps
        .run("charge", || async {
            record_effect(format!("charge {order}")).await?;
            Ok(format!("receipt for {order}"))
        })
        .await?;
    // The charge step is stored: a test may kill the process from here on.
    record_effect(format!("between {order}")).await?;
    tokio::time::sleep(Duration::from_millis(pause_ms.unwrap_or(0))).await;
    steps
        .run("mail", || async {
            record_effect(format!("mail {order}")).await
        })
        .await?;
    Ok(format!("{receipt} mailed"))
}

/// Charges an order at once (no task): one `charge ORDER` line in the effects file, after
/// waiting `ms` milliseconds. Called with an idempotency key, a repeat gets the first call's
/// answer and charges nothing.
#[task_tool(mode = "forbidden")]
async fn charge_now(
    #[arg(description = "The order to charge.")] order: String,
    #[arg(description = "How long to wait before charging, in milliseconds (default 0).")]
    ms: Option<u64>,
) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(ms.unwrap_or(0))).await;
    record_effect(format!("charge {order}")).await?;
    Ok(format!("charged {order}"))
}

/// Leaves `start KEY` in the effects file, works for `ms` milliseconds (default 0), then
/// leaves `done KEY`. Run again by whichever process takes it over when its run is cut short.
#[task_tool(
    mode = "optional",
    poll_interval = "100ms",
    idempotent,
    on_restart = "rerun"
)]
async fn mark(
    #[arg(description = "What the lines name.")] key: String,
    #[arg(description = "How long the work takes, in milliseconds (default 0).")] ms: Option<u64>,
) -> Result<String, ToolError> {
    marked(key, ms).await
}

/// [`mark`], but settled as failed when its run is cut short.
#[task_tool(mode = "required", poll_interval = "100ms")]
async fn mark_once(
    #[arg(description = "What the lines name.")] key: String,
    #[arg(description = "How long the work takes, in milliseconds (default 0).")] ms: Option<u64>,
) -> Result<String, ToolError> {
    marked(key, ms).await
}

async fn marked(key: String, ms: Option<u64>) -> Result<String, ToolError> {
    record_effect(format!("start {key}")).await?;
    tokio::time::sleep(Duration::from_millis(ms.unwrap_or(0))).await;
    record_effect(format!("done {key}")).await?;
    Ok(format!("marked {key}"))
}

/// How many times each step was done, by order.
#[derive(Debug, Default, serde::Serialize, schemars::JsonSchema)]
struct Effects {
    /// `charge` steps done, by order.
    charge: BTreeMap<String, u64>,
    /// `mail` steps done, by order.
    mail: BTreeMap<String, u64>,
}

/// Counts the effects `charge_then_mail` recorded in the effects file, by step and order.
#[task_tool(mode = "forbidden", read_only)]
async fn side_effects() -> Result<Json<Effects>, ToolError> {
    let mut effects = Effects::default();
    let Some(path) = std::env::var_os(EFFECTS_FILE) else {
        return Ok(Json(effects));
    };
    let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
        .await
        .map_err(|e| ToolError::new(format!("the effects reader stopped: {e}")))?;
    let text = match read {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    for line in text.lines() {
        let counts = match line.split_once(' ') {
            Some(("charge", order)) => effects.charge.entry(order.to_owned()),
            Some(("mail", order)) => effects.mail.entry(order.to_owned()),
            _ => continue,
        };
        *counts.or_default() += 1;
    }
    Ok(Json(effects))
}

/// Reindexes one index; a call for an index being reindexed gets that task back.
#[task_tool(mode = "optional", poll_interval = "200ms", unique = ["index"])]
async fn reindex(
    #[arg(description = "The index to rebuild.")] index: String,
    #[arg(description = "How long the rebuild takes, in milliseconds (default 0).")] ms: Option<
        u64,
    >,
) -> String {
    tokio::time::sleep(Duration::from_millis(ms.unwrap_or(0))).await;
    index
}
