use mcp_tasks::task_tool;

pub struct Tools;

impl Tools {
    #[task_tool]
    pub async fn tool(&self) {}
}

fn main() {}
