//! What the gateway asks of a backend's `result` before passing it on: whether it asks for
//! input (MRTR) and which task it created, read in one walk of its top level.
//!
//! Every Modern answer to `tools/call` is asked both; three separate lookups walked the whole
//! result three times, about 8 % of a Modern request's instructions (BENCHMARKS.md).

use std::borrow::Cow;

use crate::find::{decode_string as decode, string_at, walk};
use crate::strict::keys_fold_equal;

/// The marks of one result: its `resultType` and the id of a task it created.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ResultMarks<'a> {
    /// `resultType`, decoded, when it is a string (`complete`, `input_required`, `task`).
    pub result_type: Option<Cow<'a, str>>,
    /// The task a `CreateTaskResult` names: `task.taskId` (2025-11-25) or, beside
    /// `resultType: "task"`, `taskId` (the Modern Tasks extension). A `task.taskId` that is
    /// not a string falls through to the Modern shape; either way the task is recorded as the
    /// requesting caller's, so reading more shapes can only record more, never misassign.
    pub created_task: Option<Cow<'a, str>>,
    /// Whether a top-level member is named `requestState` in any case (escapes decoded,
    /// simple case folding: `reque\u{17f}tState` too): what a client whose parser matches keys loosely (Go's `encoding/json`) would
    /// read as the backend's state, so the relay must never pass one on bare.
    pub request_state: bool,
    /// Whether `resultType` cannot be read one way: a top-level key spells it in another
    /// case (escapes decoded, simple case folding: `re\u{17f}ultType` too), or the exact key
    /// comes more than once. A loose parser (Go's `encoding/json`) may read a type the
    /// gateway did not, or parsers disagree on which copy wins, so a client could take for
    /// `input_required` an answer the gateway checked as complete: never passed on.
    pub ambiguous_type: bool,
    /// Whether the task it names cannot be read one way: `task` or `taskId` spelled in
    /// another case (escapes decoded, simple case folding) at the top level or, for
    /// `taskId`, inside `task`; an exact key there more than once; or both shapes present.
    /// A loose or first-copy parser could read a task id the gateway never renamed: such an
    /// answer is not passed on.
    pub ambiguous_task: bool,
}

impl<'a> ResultMarks<'a> {
    /// Reads the marks of `result`, JSON the gateway has already parsed (a backend's answer
    /// payload): nothing is validated again, and nothing but decoded strings comes out.
    pub fn of(result: &'a str) -> Self {
        let (mut result_type, mut task, mut task_id) = (None, None, None);
        let (mut request_state, mut ambiguous_type, mut ambiguous_task) = (false, false, false);
        let _ = walk(result, |lit, (start, end)| {
            // Each key decoded once, whatever it is compared with.
            let Some(key) = decode(lit) else {
                return;
            };
            let value = result.get(start..end);
            match key.as_ref() {
                "resultType" => {
                    ambiguous_type |= result_type.is_some();
                    result_type = value;
                }
                "task" => {
                    ambiguous_task |= task.is_some();
                    task = value;
                }
                "taskId" => {
                    ambiguous_task |= task_id.is_some();
                    task_id = value;
                }
                k if keys_fold_equal(k, "requestState") => request_state = true,
                k if keys_fold_equal(k, "resultType") => ambiguous_type = true,
                k if may_fold_to_task(k)
                    && (keys_fold_equal(k, "task") || keys_fold_equal(k, "taskId")) =>
                {
                    ambiguous_task = true;
                }
                _ => {}
            }
        });
        ambiguous_task |= task.is_some_and(|t| !task_id_reads_one_way(t));
        ambiguous_task |= task.is_some() && task_id.is_some();
        // A flat task id beside a `resultType` that reads more than one way: a client could
        // take it for a created task the gateway did not see.
        ambiguous_task |= ambiguous_type && task_id.is_some();
        let result_type = result_type.and_then(decode);
        let legacy = task.and_then(|t| string_at(t, &["taskId"]));
        let modern = || match result_type.as_deref() {
            Some("task") => task_id.and_then(decode),
            _ => None,
        };
        let created_task = legacy.or_else(modern);
        ResultMarks {
            result_type,
            created_task,
            request_state,
            ambiguous_type,
            ambiguous_task,
        }
    }

    /// Whether the result asks for input (`resultType: "input_required"`).
    pub fn input_required(&self) -> bool {
        self.result_type.as_deref() == Some("input_required")
    }
}

/// Whether a key could fold to `task` or `taskId`: it starts with `t`/`T` or a non-ASCII
/// byte (a cheap test before the fold, which every other top-level key would pay).
fn may_fold_to_task(key: &str) -> bool {
    key.as_bytes()
        .first()
        .is_some_and(|b| b.eq_ignore_ascii_case(&b't') || !b.is_ascii())
}

/// Whether a 2025-11-25 `task` object names its `taskId` one way: at most one exact key, and
/// none spelled in another case. (Not an object: nothing named, one way.)
fn task_id_reads_one_way(task: &str) -> bool {
    let mut exact = 0;
    let mut loose = false;
    let _ = walk(task, |lit, _| match decode(lit).as_deref() {
        Some("taskId") => exact += 1,
        Some(k) if keys_fold_equal(k, "taskId") => loose = true,
        _ => {}
    });
    exact <= 1 && !loose
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(json: &str) -> (Option<String>, Option<String>) {
        let m = ResultMarks::of(json);
        (
            m.result_type.map(Cow::into_owned),
            m.created_task.map(Cow::into_owned),
        )
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn reads_both_eras_task_shapes_and_the_result_type() {
        let legacy = r#"{"task":{"taskId":"t-1","status":"working"}}"#;
        assert_eq!(marks(legacy), (None, some("t-1")));
        let modern = r#"{"resultType":"task","taskId":"t-2","status":"working"}"#;
        assert_eq!(marks(modern), (some("task"), some("t-2")));
        let asks = r#"{"resultType":"input_required","inputRequests":{},"requestState":"s"}"#;
        assert!(ResultMarks::of(asks).input_required());
        let done = r#"{"content":[{"type":"text","text":"\"task\": {\"taskId\":\"x\"}"}]}"#;
        assert_eq!(marks(done), (None, None));
        assert!(!ResultMarks::of(done).input_required());
    }

    #[test]
    fn a_request_state_is_seen_in_any_case_and_spelling() {
        for json in [
            r#"{"resultType":"complete","requestState":"s"}"#,
            r#"{"REQUESTSTATE":"s"}"#,
            r#"{"\u0072equestState":"s","x":1}"#,
            r#"{"requeststate":{"nested":true}}"#,
            // U+017F (long s) folds to `s` in Go's `encoding/json`, raw or escaped.
            "{\"reque\u{17f}tState\":\"s\"}",
            r#"{"reque\u017ftState":"s"}"#,
            "{\"REQUE\u{17f}TSTATE\":\"s\"}",
        ] {
            assert!(ResultMarks::of(json).request_state, "{json}");
        }
        for json in [
            r#"{"requestStates":1}"#,
            r#"{"a":{"requestState":1}}"#,
            "[1]",
        ] {
            assert!(!ResultMarks::of(json).request_state, "{json}");
        }
    }

    #[test]
    fn a_result_type_spelled_loosely_or_twice_is_ambiguous() {
        for json in [
            r#"{"ResultType":"input_required","inputRequests":{}}"#,
            r#"{"resulttype":"complete"}"#,
            r#"{"RESULTTYPE":1}"#,
            r#"{"resultType":"complete","ResultType":"input_required"}"#,
            r#"{"Result\u0054ype":"input_required"}"#,
            // U+017F (long s) folds to `s` in Go's `encoding/json`, raw or escaped.
            "{\"re\u{17f}ultType\":\"input_required\"}",
            r#"{"re\u017fultType":"input_required"}"#,
            r#"{"resultType":"complete","x":1,"resultType":"input_required"}"#,
            r#"{"resultType":"input_required","result\u0054ype":"input_required"}"#,
        ] {
            assert!(ResultMarks::of(json).ambiguous_type, "{json}");
        }
        for json in [
            r#"{"resultType":"input_required","inputRequests":{}}"#,
            r#"{"result\u0054ype":"complete","requestState":"s"}"#,
            r#"{"resultTypes":"x","result_type":"y","a":{"ResultType":1}}"#,
            r#"{"content":[]}"#,
            "[1]",
        ] {
            assert!(!ResultMarks::of(json).ambiguous_type, "{json}");
        }
    }

    #[test]
    fn a_task_named_loosely_twice_or_in_both_shapes_is_ambiguous() {
        for json in [
            r#"{"task":{"TaskID":"b-7"}}"#,
            r#"{"Task":{"taskId":"b-7"}}"#,
            r#"{"resultType":"task","TASKID":"b-7"}"#,
            r#"{"resultType":"task","ta\u017fkId":"b-7"}"#,
            "{\"resultType\":\"task\",\"ta\u{17f}kId\":\"b-7\"}",
            r#"{"resultType":"task","taskId":"A","task":{"taskId":"B"}}"#,
            r#"{"resultType":"task","taskId":"A","taskId":"B"}"#,
            r#"{"task":{"taskId":"A","taskId":"B"}}"#,
            r#"{"task":{"taskId":"A"},"task":{"taskId":"B"}}"#,
            r#"{"resultType":"task","resultType":"complete","taskId":"raw"}"#,
            r#"{"ResultType":"task","taskId":"raw"}"#,
            // Dotted capital I and dotless small i: `i` to Java's equalsIgnoreCase.
            r#"{"resultType":"task","task\u0130d":"b-7"}"#,
            r#"{"task":{"task\u0131d":"b-7"}}"#,
            // A C-string parser stops a key at U+0000.
            r#"{"resultType":"task","taskId\u0000x":"b-7"}"#,
        ] {
            assert!(ResultMarks::of(json).ambiguous_task, "{json}");
        }
        for json in [
            r#"{"task":{"taskId":"t-1","status":"working"}}"#,
            r#"{"resultType":"task","taskId":"t-2","status":"working"}"#,
            r#"{"content":[{"type":"text","text":"TaskID"}]}"#,
            r#"{"task":"not an object"}"#,
        ] {
            assert!(!ResultMarks::of(json).ambiguous_task, "{json}");
        }
    }

    #[test]
    fn a_task_id_without_the_task_result_type_creates_nothing() {
        let stray = r#"{"resultType":"complete","taskId":"t-3"}"#;
        assert_eq!(marks(stray), (some("complete"), None));
        assert_eq!(marks(r#"{"taskId":"t-4"}"#), (None, None));
    }

    #[test]
    fn escapes_are_decoded_and_non_strings_ignored() {
        let escaped = r#"{"result\u0054ype":"input_\u0072equired"}"#;
        assert!(ResultMarks::of(escaped).input_required());
        assert_eq!(marks(r#"{"task":{"taskId":7}}"#), (None, None));
        assert_eq!(marks(r#"{"resultType":1,"taskId":"t"}"#), (None, None));
        assert_eq!(marks("[1]"), (None, None));
        assert_eq!(marks("null"), (None, None));
    }
}
