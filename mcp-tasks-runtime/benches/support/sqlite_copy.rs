//! The bulk copy the benches fill a SQLite task store with: one task copied many times by one
//! `INSERT … SELECT`, each copy with an id of its own and the next creation and change
//! sequence numbers (far faster than creating them one by one).

use std::time::Duration;

/// Copies the task `template` into `fill-{from}` … `fill-{to - 1}` in the SQLite file at
/// `path`.
pub fn sqlite_copy(path: &std::path::Path, template: &str, from: u64, to: u64) {
    let conn = rusqlite::Connection::open(path).expect("open the bench database");
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('tasks')")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let values: Vec<String> = columns
        .iter()
        .map(|c| match c.as_str() {
            "id" => "'fill-' || x".into(),
            "seq" => format!("(SELECT value FROM meta WHERE key = 'last_seq') + x - {from} + 1"),
            "change_seq" => {
                format!("(SELECT value FROM meta WHERE key = 'change_seq') + x - {from} + 1")
            }
            other => format!("t.{other}"),
        })
        .collect();
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         WITH RECURSIVE g(x) AS (SELECT {from} UNION ALL SELECT x + 1 FROM g WHERE x < {last})
         INSERT INTO tasks ({}) SELECT {} FROM tasks AS t, g WHERE t.id = '{template}';
         UPDATE meta SET value = value + {n} WHERE key IN ('last_seq', 'change_seq');
         COMMIT;",
        columns.join(", "),
        values.join(", "),
        last = to - 1,
        n = to - from,
    ))
    .expect("bulk insert");
}
