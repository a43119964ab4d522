use super::*;

/// Nothing blamed for a minute after a request ended unanswered.
fn plain() -> Plain {
    Plain::new(std::time::Duration::from_secs(60))
}

fn id() -> RequestId {
    RequestId::from_string("7")
}

fn answered() -> Result<Answer, CoreError> {
    Ok(Answer::ok(
        br#"{"jsonrpc":"2.0","id":"7","result":{}}"#.to_vec(),
    ))
}

/// The blame wins over an answer that is ready too (a CI run once got the backend's answer
/// to a call it had blamed: `tokio::select!` picks at random among ready branches). Many
/// rounds, so that a random pick fails the test.
#[tokio::test]
async fn a_blamed_call_answers_minus_32021_even_when_its_answer_is_ready_too() {
    for _ in 0..64 {
        let plain = plain();
        let call = plain.start();
        plain.blame("sampling");
        let answer = call.answer_or_blamed(&id(), async { answered() }).await;
        assert_eq!(answer.unwrap().error_code, Some(-32021));
    }
}

/// Two calls running: the backend's request is nobody's to blame; each gets its answer.
#[tokio::test]
async fn with_two_calls_running_nobody_is_blamed() {
    let plain = plain();
    let (one, _two) = (plain.start(), plain.start());
    plain.blame("sampling");
    let answer = one.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, None);
}

/// A list or completion running beside the call could be what asked (review MEDIUM: any
/// request on the partition, not only calls declaring nothing).
#[tokio::test]
async fn with_another_request_running_nobody_is_blamed() {
    let plain = plain();
    let (call, _list) = (plain.start(), plain.start_other());
    plain.blame("sampling");
    let answer = call.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, None);
}

/// A request that ended without its answer (its client gone, or timed out) may still be
/// running at the backend, and ask later: that is blamed on no call that runs alone after it
/// (review MEDIUM: it was blamed on whichever call ran then) ...
#[tokio::test]
async fn after_a_request_ended_unanswered_nothing_is_blamed() {
    for abandoned in [
        // Dropped mid-way (the client went away).
        Box::new(|plain: &Plain| drop(plain.start())) as Box<dyn Fn(&Plain)>,
        Box::new(|plain: &Plain| drop(plain.start_other())),
    ] {
        let plain = plain();
        abandoned(&plain);
        let call = plain.start();
        plain.blame("sampling");
        let answer = call.answer_or_blamed(&id(), async { answered() }).await;
        assert_eq!(answer.unwrap().error_code, None);
    }
    // Failed (a deadline): the same.
    let plain = plain();
    let timed_out = async { Err(CoreError::Timeout(std::time::Duration::from_secs(1))) };
    assert!(plain
        .start()
        .answer_or_blamed(&id(), timed_out)
        .await
        .is_err());
    let call = plain.start();
    plain.blame("sampling");
    let answer = call.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, None);
}

/// Requests answered before keep the next call attributable, a blamed one included (it
/// waited for its handler's answer).
#[tokio::test]
async fn answered_requests_leave_the_next_call_attributable() {
    let plain = plain();
    let other = plain.start_other();
    assert!(other
        .answer_or_blamed(&id(), async { answered() })
        .await
        .is_ok());
    let first = plain.start();
    plain.blame("sampling");
    let answer = first.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, Some(-32021));
    let next = plain.start();
    plain.blame("elicitation");
    let answer = next.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, Some(-32021));
}

/// ... for as long as a request may take: then blaming resumes (review LOW: one abandoned
/// request turned -32021 off for the partition's life, for every caller sharing it).
#[tokio::test(start_paused = true)]
async fn blaming_resumes_once_an_abandoned_request_has_surely_ended() {
    let plain = plain();
    drop(plain.start());
    tokio::time::advance(std::time::Duration::from_secs(59)).await;
    let call = plain.start();
    plain.blame("sampling");
    let answer = call.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, None, "within the hold");
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    let call = plain.start();
    plain.blame("sampling");
    let answer = call.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, Some(-32021), "after it");
}

/// A blamed call answers only once its backend answered (its handler has ended): before,
/// another call starting alone meanwhile would be blamed for what the handler asked next.
#[tokio::test]
async fn a_blamed_call_waits_for_its_backends_answer() {
    let plain = plain();
    let call = plain.start();
    plain.blame("sampling");
    let backend = std::sync::Arc::new(tokio::sync::Notify::new());
    let answered_now = backend.clone();
    let waiting = tokio::spawn(async move {
        let answer = async move {
            answered_now.notified().await;
            answered()
        };
        call.answer_or_blamed(&id(), answer).await
    });
    // The call runs up to its wait for the backend (one turn of this single thread).
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "answered before its backend did");
    // Still running: the next call does not run alone.
    let next = plain.start();
    plain.blame("elicitation");
    backend.notify_one();
    let answer = waiting.await.unwrap().unwrap();
    assert_eq!(answer.error_code, Some(-32021));
    let answer = next.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, None);
}
