use super::*;

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
        let plain = Plain::default();
        let call = plain.start();
        plain.blame("sampling");
        let answer = call.answer_or_blamed(&id(), async { answered() }).await;
        assert_eq!(answer.unwrap().error_code, Some(-32021));
    }
}

/// Two calls running: the backend's request is nobody's to blame; each gets its answer.
#[tokio::test]
async fn with_two_calls_running_nobody_is_blamed() {
    let plain = Plain::default();
    let (one, _two) = (plain.start(), plain.start());
    plain.blame("sampling");
    let answer = one.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, None);
}

/// A list or completion running beside the call could be what asked (review MEDIUM: any
/// request on the partition, not only calls declaring nothing).
#[tokio::test]
async fn with_another_request_running_nobody_is_blamed() {
    let plain = Plain::default();
    let (call, _list) = (plain.start(), plain.start_other());
    plain.blame("sampling");
    let answer = call.answer_or_blamed(&id(), async { answered() }).await;
    assert_eq!(answer.unwrap().error_code, None);
}

/// A request that ended without its answer (its client gone, or timed out) may still be
/// running at the backend, and ask later: that is blamed on no call that runs alone after it
/// (review MEDIUM: it was blamed on whichever call ran then).
#[tokio::test]
async fn after_a_request_ended_unanswered_nothing_is_blamed() {
    for abandoned in [
        // Dropped mid-way (the client went away).
        Box::new(|plain: &Plain| drop(plain.start())) as Box<dyn Fn(&Plain)>,
        Box::new(|plain: &Plain| drop(plain.start_other())),
    ] {
        let plain = Plain::default();
        abandoned(&plain);
        let call = plain.start();
        plain.blame("sampling");
        let answer = call.answer_or_blamed(&id(), async { answered() }).await;
        assert_eq!(answer.unwrap().error_code, None);
    }
    // Failed (a deadline): the same.
    let plain = Plain::default();
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
    let plain = Plain::default();
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
