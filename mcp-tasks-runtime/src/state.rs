//! Application state: values registered on the server builder that tools take as
//! [`State<T>`] (a database pool, an HTTP client, a configuration).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A value of type `T` registered with [`ServerBuilder::state`](crate::ServerBuilder::state),
/// taken as a parameter of a `#[task_tool]` function (or from
/// [`TaskContext::state`](crate::TaskContext::state) in a [`Tool`](crate::Tool) handler). Cheap to clone; derefs
/// to `T`.
///
/// A tool that takes `State<T>` of a type nobody registered makes the server's `build()` fail
/// with an error naming the tool and the type, so a missing registration never reaches a
/// call. Tasks run by a [`Worker`](crate::Worker) see the worker's registrations: register the
/// same state on workers and servers.
///
/// ```
/// use mcp_tasks_runtime::{Server, State, Tool, model::{CallToolResult, Content}};
///
/// struct Greeting(String);
///
/// let server = Server::builder()
///     .state(Greeting("hello".into()))
///     .tool(
///         Tool::new("greet", |cx, _| async move {
///             let greeting = cx.state::<Greeting>().expect("registered");
///             Ok(CallToolResult::success(vec![Content::text(greeting.0.clone())]))
///         })
///         .requires_state::<Greeting>(),
///     )
///     .build()
///     .unwrap();
/// # let _ = server;
/// ```
pub struct State<T: ?Sized>(Arc<T>);

impl<T: ?Sized> State<T> {
    /// The shared value.
    pub fn arc(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T: ?Sized> Clone for State<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T: ?Sized> Deref for State<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("State").field(&&*self.0).finish()
    }
}

/// A state type a tool needs, checked when the server is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateRequirement {
    /// The type's id.
    pub type_id: TypeId,
    /// The type's name, for the error when nobody registered it.
    pub type_name: &'static str,
}

impl StateRequirement {
    /// The requirement of a `State<T>`.
    pub fn of<T: Send + Sync + 'static>() -> Self {
        Self {
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
        }
    }
}

/// Every registered value, by type.
#[derive(Clone, Default)]
pub(crate) struct StateMap {
    values: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl fmt::Debug for StateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMap")
            .field("values", &self.values.len())
            .finish()
    }
}

impl StateMap {
    pub(crate) fn new(values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>) -> Self {
        Self {
            values: Arc::new(values),
        }
    }

    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<State<T>> {
        let value = Arc::clone(self.values.get(&TypeId::of::<T>())?);
        value.downcast::<T>().ok().map(State)
    }

    pub(crate) fn has(&self, requirement: &StateRequirement) -> bool {
        self.values.contains_key(&requirement.type_id)
    }
}
