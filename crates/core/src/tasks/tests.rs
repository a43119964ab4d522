use super::*;
use serde_json::json;

fn session(id: &str) -> Owner {
    Owner::session(id)
}

fn principal(subject: &str) -> Owner {
    Owner::Principal {
        issuer: "api-key".into(),
        subject: subject.into(),
    }
}

/// Records as `owner`, a session's being its own principal's (`owner-of-<id>`).
fn record(t: &TaskOwners, owner: &Owner, result: &str, call: Option<&RawValue>) {
    let principal = match owner {
        Owner::Principal { issuer, subject } => (issuer.clone(), subject.clone()),
        Owner::Session(id) => ("api-key".to_owned(), format!("owner-of-{id}")),
    };
    t.record(owner, &principal, result, call);
}

fn legacy_task(id: &str) -> String {
    format!(r#"{{"task":{{"taskId":"{id}","status":"working"}}}}"#)
}

#[test]
fn ownership_and_filtering() {
    let t = TaskOwners::default();
    let (a, b) = (session("a"), session("b"));
    record(&t, &a, &legacy_task("t1"), None);
    record(&t, &b, &legacy_task("t2"), None);
    record(&t, &b, r#"{"content":[]}"#, None);
    assert!(t.owns(Some(&a), "t1") && !t.owns(Some(&b), "t1"));
    assert!(!t.owns(Some(&a), "nope") && !t.owns(None, "t1"));
    let list = json!({"tasks":[{"taskId":"t1"},{"taskId":"t2"},{"taskId":"t3"}],"nextCursor":"c"})
        .to_string();
    let mine: Value = serde_json::from_str(&t.filter_list(Some(&a), &list)).unwrap();
    let h1 = t.handle_for(Some(&a), "t1").unwrap();
    assert_eq!(mine, json!({"tasks":[{"taskId":h1}],"nextCursor":"c"}));
    let nobody: Value = serde_json::from_str(&t.filter_list(None, &list)).unwrap();
    assert_eq!(nobody, json!({"tasks":[],"nextCursor":"c"}));
    // Another id under a key a loose parser reads as `taskId` (or `tasks`) never passes.
    let tag = json!({META_RELATED_TASK: {"taskId": "t2"}});
    let loose = json!({"tasks":[{"taskId":"t1","TaskId":"t2","taskId\u{0}x":"t2","_meta":tag}],
        "Tasks":[{"taskId":"t2"}]});
    let mine: Value = serde_json::from_str(&t.filter_list(Some(&a), &loose.to_string())).unwrap();
    assert_eq!(mine, json!({"tasks":[{"taskId":h1,"_meta":{}}]}));
    let odd = t.filter_list(Some(&a), r#"{"tasks":{"taskId":"t1"}}"#);
    assert_eq!(
        odd, r#"{"tasks":[]}"#,
        "what cannot be filtered is not passed"
    );
    t.purge("a");
    assert_eq!(t.len(), 2, "b's task and b's index row");
    t.purge("b");
    assert_eq!(t.len(), 0);
    let p = RawValue::from_string(
        r#"{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t2"}}}"#.into(),
    )
    .unwrap();
    assert_eq!(task_of(Some(&p)).as_deref(), Some("t2"));
}

#[test]
fn a_request_names_one_task() {
    let named = |p: &str| requested_task(Some(&RawValue::from_string(p.into()).unwrap()));
    assert_eq!(named(r#"{"taskId":"t"}"#).as_deref(), Some("t"));
    assert_eq!(
        named(r#"{"task\u0049d":"t","x":{"taskId":"u"}}"#).as_deref(),
        Some("t")
    );
    assert_eq!(named(r#"{"taskId":"t","taskId":"u"}"#), None, "duplicates");
    assert_eq!(
        named(r#"{"taskId":"t","task\u0049d":"u"}"#),
        None,
        "escaped duplicate"
    );
    assert_eq!(named(r#"{"taskId":7}"#), None);
    assert_eq!(named(r#"{}"#), None);
    assert_eq!(named(r#"[1]"#), None);
    assert_eq!(requested_task(None), None);
}

/// The owner of a sessionless call is its principal, the anonymous one included (it exists
/// only on a gateway without authentication). A principal's stateless tasks are not its
/// sessions' and vice versa.
#[test]
fn owners_by_session_and_principal() {
    let alice = Principal {
        issuer: "api-key".into(),
        subject: "alice".into(),
        claims: serde_json::Map::new(),
        credential: None,
    };
    let sid = SessionId::mint();
    assert_eq!(
        Owner::of(&Principal::anonymous(), None),
        Owner::Principal {
            issuer: "anonymous".into(),
            subject: "anonymous".into()
        }
    );
    assert_eq!(
        Owner::of(&Principal::anonymous(), Some(&sid)),
        session(sid.as_str())
    );
    assert_eq!(Owner::of(&alice, None), principal("alice"));
    assert_eq!(Owner::of(&alice, Some(&sid)), session(sid.as_str()));

    let t = TaskOwners::default();
    record(&t, &principal("alice"), &legacy_task("p1"), None);
    record(
        &t,
        &principal("alice"),
        r#"{"resultType":"task","taskId":"m1","status":"working"}"#,
        None,
    );
    record(
        &t,
        &principal("bob"),
        r#"{"resultType":"complete","taskId":"x"}"#,
        None,
    );
    assert!(t.owns(Some(&principal("alice")), "p1"));
    assert!(t.owns(Some(&principal("alice")), "m1"), "Modern task shape");
    assert!(t.owner("x").is_none(), "a complete result creates no task");
    assert!(!t.owns(Some(&principal("bob")), "p1"));
    assert!(!t.owns(Some(&session(sid.as_str())), "p1"));
    let other_issuer = Owner::Principal {
        issuer: "https://idp".into(),
        subject: "alice".into(),
    };
    assert!(!t.owns(Some(&other_issuer), "p1"), "issuer and subject");
    t.purge(sid.as_str());
    assert!(t.owns(Some(&principal("alice")), "p1"), "not a session's");
}

/// A task id handed to a second owner belongs to neither: reassigning it would give one
/// owner the other's task.
#[test]
fn a_reused_task_id_belongs_to_nobody() {
    let t = TaskOwners::default();
    record(&t, &principal("alice"), &legacy_task("dup"), None);
    record(&t, &principal("bob"), &legacy_task("dup"), None);
    assert!(t.owner("dup").is_none());
    assert!(!t.owns(Some(&principal("alice")), "dup"));
    assert!(!t.owns(Some(&principal("bob")), "dup"));
    // Nor anyone who brings it later: the id is retired, not free.
    for who in ["bob", "carol", "alice"] {
        record(&t, &principal(who), &legacy_task("dup"), None);
        assert!(t.owner("dup").is_none(), "{who} was given it");
        assert!(t.handle_for(Some(&principal(who)), "dup").is_none());
    }
}

/// A task forgotten while the backend may still run it (its session ended, or its owner's
/// bound evicted it) is given to no one who brings its id afterwards.
#[test]
fn a_forgotten_task_is_not_given_to_the_next_owner_of_its_id() {
    let t = TaskOwners::default();
    record(&t, &session("s1"), &legacy_task("t-1"), None);
    t.purge("s1");
    record(&t, &principal("mallory"), &legacy_task("t-1"), None);
    assert!(t.owner("t-1").is_none());
    let greedy = principal("greedy");
    for i in 0..MAX_TASKS_PER_OWNER + 1 {
        record(&t, &greedy, &legacy_task(&format!("g{i}")), None);
    }
    record(&t, &principal("mallory"), &legacy_task("g0"), None);
    assert!(t.owner("g0").is_none(), "an evicted id stays retired");
}

/// An owner that creates tasks without end forgets its own oldest ones; another owner's
/// tasks stay reachable.
#[test]
fn one_owner_cannot_crowd_out_anothers_tasks() {
    let t = TaskOwners::default();
    let (victim, greedy) = (session("victim"), principal("greedy"));
    record(&t, &victim, &legacy_task("v1"), None);
    record(&t, &victim, &legacy_task("v1"), None);
    assert_eq!(t.len(), 2, "a task recorded twice is indexed once");
    for i in 0..MAX_TASKS_PER_OWNER + 10 {
        record(&t, &greedy, &legacy_task(&format!("g{i}")), None);
    }
    assert!(t.owns(Some(&victim), "v1"));
    assert!(
        !t.owns(Some(&greedy), "g0"),
        "the greedy owner's oldest is forgotten"
    );
    let newest = format!("g{}", MAX_TASKS_PER_OWNER + 9);
    assert!(t.owns(Some(&greedy), &newest));
    assert_eq!(t.len(), 1 + MAX_TASKS_PER_OWNER + 2);
    t.purge("victim");
    t.clear();
    assert_eq!(t.len(), 0);
}

/// A task reaches its owner under a minted handle: the handle names the task for its owner
/// only, names nothing once the task is forgotten, and two owners' handles differ even where
/// a backend's ids would not.
#[test]
fn handles_name_tasks_for_their_owner_only() {
    let t = TaskOwners::default();
    let (alice, bob) = (principal("alice"), principal("bob"));
    record(&t, &alice, &legacy_task("t1"), None);
    record(&t, &bob, &legacy_task("t2"), None);
    let (ha, hb) = (
        t.handle_for(Some(&alice), "t1").unwrap(),
        t.handle_for(Some(&bob), "t2").unwrap(),
    );
    assert!(ha.starts_with(HANDLE_PREFIX) && ha.len() == HANDLE_PREFIX.len() + 32);
    assert_ne!(ha, hb);
    assert_eq!(t.task_for(Some(&alice), &ha).as_deref(), Some("t1"));
    assert_eq!(t.task_for(Some(&bob), &ha), None, "another owner's handle");
    assert_eq!(t.task_for(None, &ha), None);
    assert_eq!(
        t.task_for(Some(&alice), "t1"),
        None,
        "the backend's id is no handle"
    );
    assert_eq!(t.handle_for(Some(&bob), "t1"), None);
    assert_eq!(t.owner("t2"), Some((bob.clone(), hb.clone())));
    assert!(t.has_any(&alice) && !t.has_any(&principal("carol")));
    record(&t, &bob, &legacy_task("t1"), None);
    assert_eq!(t.task_for(Some(&alice), &ha), None, "a reused id: nobody's");
    t.clear();
    assert_eq!(t.task_for(Some(&bob), &hb), None);
}

#[test]
fn handles_name_their_replica_when_there_are_replicas() {
    let here = TaskOwners::at_replica(Some("0123456789abcdef".into()));
    record(&here, &principal("alice"), &legacy_task("t1"), None);
    let handle = here.handle_for(Some(&principal("alice")), "t1").unwrap();
    assert_eq!(super::replica_of_handle(&handle), Some("0123456789abcdef"));
    assert_eq!(handle.len(), "sbt-".len() + 16 + 1 + 32);
    let alone = TaskOwners::default();
    record(&alone, &principal("alice"), &legacy_task("t1"), None);
    let handle = alone.handle_for(Some(&principal("alice")), "t1").unwrap();
    assert_eq!(super::replica_of_handle(&handle), None, "{handle}");
}

/// A task remembers the tool whose call created it (its result is checked as that tool's).
#[test]
fn a_task_remembers_its_tool() {
    let t = TaskOwners::default();
    let call = serde_json::value::RawValue::from_string(r#"{"name":"work","arguments":{}}"#.into())
        .unwrap();
    record(&t, &principal("alice"), &legacy_task("w1"), Some(&call));
    record(&t, &principal("alice"), &legacy_task("w2"), None);
    assert_eq!(t.tool_of("w1").as_deref(), Some("work"));
    assert_eq!(t.tool_of("w2"), None);
    assert_eq!(t.tool_of("unknown"), None);
}

/// A task named ambiguously is refused on its way to the client, so it is not recorded
/// either: no handle, nothing counted against its owner.
#[test]
fn a_task_named_ambiguously_is_not_recorded() {
    let t = TaskOwners::default();
    let a = session("a");
    record(&t, &a, r#"{"task":{"taskId":"A","TaskID":"B"}}"#, None);
    record(
        &t,
        &a,
        r#"{"resultType":"task","taskId":"C","task":{"taskId":"D"}}"#,
        None,
    );
    for id in ["A", "B", "C", "D"] {
        assert!(!t.owns(Some(&a), id), "{id} recorded");
    }
    assert_eq!(t.len(), 0);
    record(&t, &a, &legacy_task("E"), None);
    assert!(t.owns(Some(&a), "E"));
}

/// An answer that created a task and names another of the backend's beside it is refused
/// (`finished`), and its task is not recorded: no handle, no owner, no room taken.
#[test]
fn a_task_named_beside_another_is_not_recorded() {
    let t = TaskOwners::default();
    let alice = principal("alice");
    let tag = |id: &str| json!({META_RELATED_TASK: {"taskId": id}});
    for answer in [
        json!({"task": {"taskId": "t1"}, "_meta": tag("t2")}),
        json!({"resultType": "task", "taskId": "t1", "_Meta": tag("t2")}),
    ] {
        record(&t, &alice, &answer.to_string(), None);
    }
    record(
        &t,
        &alice,
        r#"{"task":{"taskId":"t1"},"content":[{"a":1,"a":2}]}"#,
        None,
    );
    assert!(!t.owns(Some(&alice), "t1"));
    assert_eq!(t.len(), 0);
    record(
        &t,
        &alice,
        &json!({"task": {"taskId": "t1"}, "_meta": tag("t1")}).to_string(),
        None,
    );
    assert!(t.owns(Some(&alice), "t1"));
}

/// One principal's owners (sessions) together hold at most its share of the table: past
/// it, a task in another of its sessions is not tracked, while another principal's still
/// is, and a session at its own bound still trades its oldest for its newest. Before, each
/// session had its own bound and nothing else, so one principal opening sessions filled
/// the table for every caller (review MEDIUM).
#[test]
fn one_principal_s_sessions_cannot_fill_the_table() {
    let t = TaskOwners::default();
    let of_greedy = |i: usize| Owner::session(&format!("greedy-{i}"));
    let greedy = ("api-key".to_owned(), "greedy".to_owned());
    let sessions = MAX_TASKS_PER_PRINCIPAL / MAX_TASKS_PER_OWNER + 1;
    for s in 0..sessions {
        for i in 0..MAX_TASKS_PER_OWNER {
            t.record(
                &of_greedy(s),
                &greedy,
                &legacy_task(&format!("g{s}-{i}")),
                None,
            );
        }
    }
    let held = (t.table.lock().per_principal.get(&greedy)).copied();
    assert_eq!(held, Some(MAX_TASKS_PER_PRINCIPAL));
    let next = sessions;
    t.record(&of_greedy(next), &greedy, &legacy_task("over"), None);
    assert!(
        t.owner("over").is_none(),
        "past its share, a new session's task"
    );
    // Its first session holds its own bound: its next task replaces its oldest.
    t.record(&of_greedy(0), &greedy, &legacy_task("traded"), None);
    assert!(
        t.owns(Some(&of_greedy(0)), "traded"),
        "a session at its own bound trades"
    );
    assert!(!t.owns(Some(&of_greedy(0)), "g0-0"));
    record(&t, &principal("alice"), &legacy_task("a1"), None);
    assert!(
        t.owns(Some(&principal("alice")), "a1"),
        "another principal still records"
    );
    for s in 0..=next {
        t.purge(&format!("greedy-{s}"));
    }
    assert!(
        !t.table.lock().per_principal.contains_key(&greedy),
        "purged, it holds none"
    );
}

/// The anonymous principal is every caller of a gateway without authentication: its
/// sessions together are bounded by the table, not by one principal's share.
#[test]
fn the_anonymous_principal_s_sessions_share_the_whole_table() {
    let t = TaskOwners::default();
    let anonymous = ("anonymous".to_owned(), "anonymous".to_owned());
    let sessions = MAX_TASKS_PER_PRINCIPAL / MAX_TASKS_PER_OWNER + 1;
    for s in 0..=sessions {
        let owner = Owner::session(&format!("anon-{s}"));
        for i in 0..MAX_TASKS_PER_OWNER {
            t.record(&owner, &anonymous, &legacy_task(&format!("a{s}-{i}")), None);
        }
    }
    let last = Owner::session(&format!("anon-{sessions}"));
    assert!(t.owns(Some(&last), &format!("a{sessions}-0")));
}

/// A full table makes room from the principal holding the most: eight principals within
/// their shares filled it, and every other caller's task was created at the backend but not
/// tracked, for as long as their sessions lived (review MEDIUM).
#[test]
fn a_full_table_makes_room_from_the_principal_holding_the_most() {
    let t = TaskOwners::default();
    let heavy = MAX_TASKS / MAX_TASKS_PER_PRINCIPAL;
    for p in 0..heavy {
        let who = ("api-key".to_owned(), format!("heavy-{p}"));
        for i in 0..MAX_TASKS_PER_PRINCIPAL {
            let session = Owner::session(&format!("h{p}-{}", i / MAX_TASKS_PER_OWNER));
            t.record(&session, &who, &legacy_task(&format!("h{p}-{i}")), None);
        }
    }
    assert_eq!(t.table.lock().owners.len(), MAX_TASKS);
    // One more task of the first: it holds the most, so its own oldest goes.
    let first = ("api-key".to_owned(), "heavy-0".to_owned());
    let last_session = Owner::session(&format!(
        "h0-{}",
        MAX_TASKS_PER_PRINCIPAL / MAX_TASKS_PER_OWNER
    ));
    t.record(&last_session, &first, &legacy_task("h0-more"), None);
    // Past its share: not tracked, and nobody else's task was forgotten for it.
    assert!(t.owner("h0-more").is_none());
    assert_eq!(t.table.lock().owners.len(), MAX_TASKS);

    record(&t, &principal("alice"), &legacy_task("a1"), None);
    assert!(
        t.owns(Some(&principal("alice")), "a1"),
        "another caller's task is tracked"
    );
    let table = t.table.lock();
    assert_eq!(table.owners.len(), MAX_TASKS);
    let forgotten: Vec<&String> = table.retired.iter().collect();
    assert_eq!(forgotten.len(), 1, "{forgotten:?}");
    assert!(
        forgotten[0].starts_with('h'),
        "a heavy principal's: {forgotten:?}"
    );
}
