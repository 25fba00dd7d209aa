use mcp_tasks::task_tool;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    pages: u32,
}

#[task_tool]
async fn tool(#[input] _args: Args, _verbose: bool) {}

fn main() {}
