//! What a client is told when the gateway refuses it something about tasks: the errors of
//! the task stage, each in one place.

use switchboard_wire::{codes, ErrorObject};

use super::EXTENSION;

/// -32021 for a Modern task method from a request that did not declare the Tasks extension,
/// naming the capability it lacks.
pub(crate) fn missing_extension() -> ErrorObject {
    ErrorObject::new(
        codes::MISSING_CLIENT_CAPABILITY,
        "Missing required client capability: the io.modelcontextprotocol/tasks extension",
    )
    .with_data(serde_json::json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}}))
}

/// The one answer for a task the caller cannot see, whether it exists or not (also the
/// HTTP layer's, for a handle whose replica is gone).
pub fn unknown_task() -> ErrorObject {
    ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: unknown taskId")
}

/// The answer for a task the backend created that the gateway could not track: its id would
/// name nothing the caller could reach, and the backend's own id is never handed out.
pub(crate) fn untracked_task() -> ErrorObject {
    ErrorObject::new(
        codes::INTERNAL_ERROR,
        "Internal error: the task was created but the gateway cannot track it (too many tasks)",
    )
}

/// A task the backend named in a way parsers may read differently
/// (`ResultMarks::ambiguous_task`): neither recorded nor passed on.
pub(crate) fn ambiguous_task() -> ErrorObject {
    ErrorObject::new(
        codes::INTERNAL_ERROR,
        "Internal error: the backend named the task it created ambiguously",
    )
}

/// A task a replicated backend created anyway (the client did not ask for one): the gateway
/// cannot say which process holds it, so it is not handed out.
pub(crate) fn untracked_on_replicas() -> ErrorObject {
    ErrorObject::new(
        codes::INTERNAL_ERROR,
        "Internal error: the backend created a task, but it runs replicas, which keep no tasks",
    )
}

/// A task's state a backend answered naming some task other than the caller's, or naming it
/// ambiguously (`tasks::one_task_named`): not passed on.
pub(crate) fn ambiguous_answer() -> ErrorObject {
    ErrorObject::new(
        codes::INTERNAL_ERROR,
        "Internal error: the backend's answer names its task ambiguously",
    )
}
