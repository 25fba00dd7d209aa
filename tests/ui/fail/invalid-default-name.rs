use mcp_tasks::task_tool;

/// A tool.
#[task_tool]
async fn render_the_quarterly_report_for_every_region_and_every_product_line() {}

fn main() {}
