//! Unit tests of tool definitions and their checks.

use super::*;

fn noop(name: &str) -> Tool {
    Tool::new(name, |_, _| async { Ok(CallToolResult::default()) })
}

#[test]
fn tool_names_follow_the_strict_rule() {
    for ok in ["a", "get_weather", "v1.2-beta", &"x".repeat(64)] {
        assert!(is_valid_tool_name(ok), "{ok}");
    }
    for bad in ["", "has space", "slash/name", "ünï", &"x".repeat(65)] {
        assert!(!is_valid_tool_name(bad), "{bad}");
    }
}

// The rule works in a const context, where the code `#[task_tool]` generates uses it.
const _: () = assert!(is_valid_tool_name("v1.2-beta") && !is_valid_tool_name("has space"));

#[test]
fn duplicate_names_are_an_error_naming_both() {
    let mut r = Registry::default();
    r.insert(noop("a")).unwrap();
    let err = r.insert(noop("a")).unwrap_err();
    assert!(matches!(err, ToolDefError::DuplicateTool { .. }));
    assert!(err.to_string().contains("\"a\""));
}

#[test]
fn rerun_needs_idempotent() {
    let tool = noop("a").on_restart(RestartPolicy::Rerun);
    assert_eq!(
        tool.check(),
        Err(ToolDefError::RerunNotIdempotent("a".into()))
    );
}

#[test]
fn rerun_of_an_unresumable_call_needs_idempotent() {
    let tool = noop("a").on_unresumable(ResumePolicy::Rerun);
    assert_eq!(
        tool.check(),
        Err(ToolDefError::RerunUnresumableNotIdempotent("a".into()))
    );
    let idempotent = ToolAnnotations {
        idempotent_hint: Some(true),
        ..Default::default()
    };
    assert_eq!(tool.annotations(idempotent).check(), Ok(()));
    assert_eq!(noop("b").on_unresumable, ResumePolicy::Fail);
}

#[test]
fn structured_output_must_be_an_object() {
    let list = Tool::typed("list", |_, _: JsonObject| async {
        Json(vec!["a.txt".to_owned()])
    });
    assert_eq!(
        list.check(),
        Err(ToolDefError::OutputNotObject("list".into()))
    );
    let raw = noop("raw").output_schema(serde_json::json!({"type": "array"}));
    let err = crate::Server::builder().tool(raw).build().unwrap_err();
    assert!(
        err.to_string().contains("\"raw\"") && err.to_string().contains("struct"),
        "{err}"
    );

    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Files {
        files: Vec<String>,
    }
    let wrapped = Tool::typed("files", |_, _: JsonObject| async {
        Json(Files { files: Vec::new() })
    });
    assert_eq!(wrapped.check(), Ok(()));
    let map = Tool::typed("map", |_, _: JsonObject| async {
        Json(BTreeMap::<String, u32>::new())
    });
    assert_eq!(map.check(), Ok(()));
}

#[test]
fn raw_arguments_are_validated_against_the_schema() {
    let tool = noop("a").input_schema(serde_json::json!({
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"]
    }));
    assert!(tool.check_arguments(JsonObject::new()).is_err());
    let mut ok = JsonObject::new();
    ok.insert("n".into(), 3.into());
    assert_eq!(tool.check_arguments(ok.clone()).unwrap(), ok);
}

#[test]
fn rerun_may_rest_on_durable_steps_instead_of_idempotence() {
    let tool = noop("a").on_restart(RestartPolicy::Rerun);
    let err = tool.clone().check().unwrap_err();
    assert!(err.to_string().contains("durable steps"), "{err}");
    assert_eq!(tool.durable_steps(true).check(), Ok(()));
    // A synchronous call stores no steps: rerunning one still needs idempotence.
    let unresumable = noop("b")
        .durable_steps(true)
        .on_unresumable(ResumePolicy::Rerun);
    assert_eq!(
        unresumable.check(),
        Err(ToolDefError::RerunUnresumableNotIdempotent("b".into()))
    );
}

#[test]
fn unique_names_arguments_of_the_input_schema_and_needs_tasks() {
    let tool = noop("reindex")
        .input_schema(serde_json::json!({
            "type": "object",
            "properties": {"index": {"type": "string"}, "tenant": {"type": "string"}}
        }))
        .task_support(TaskSupport::Optional);
    assert_eq!(
        tool.clone().unique(Unique::by(["index", "tenant"])).check(),
        Ok(())
    );
    assert_eq!(tool.clone().unique(Unique::all()).check(), Ok(()));
    let err = tool.clone().unique(Unique::by(["index", "shard"])).check();
    assert_eq!(
        err,
        Err(ToolDefError::UniqueArgUnknown {
            tool: "reindex".into(),
            arg: "shard".into()
        })
    );
    assert_eq!(
        tool.task_support(TaskSupport::Forbidden)
            .unique(Unique::all())
            .check(),
        Err(ToolDefError::UniqueForbidden("reindex".into()))
    );
    // A schema without properties has no argument to be unique by.
    let bare = noop("bare")
        .task_support(TaskSupport::Required)
        .unique(Unique::by(["x"]));
    assert!(matches!(
        bare.check(),
        Err(ToolDefError::UniqueArgUnknown { .. })
    ));
}
