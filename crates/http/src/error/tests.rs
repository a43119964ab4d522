use super::*;

#[tokio::test]
async fn an_operator_endpoint_refusal_is_mapped_here_with_an_error_body() {
    let cases = [
        (OpsError::NotApprover, StatusCode::FORBIDDEN),
        (OpsError::NothingPending, StatusCode::NOT_FOUND),
        (OpsError::Changed, StatusCode::CONFLICT),
        (
            OpsError::Core(CoreError::Forbidden("no")),
            StatusCode::FORBIDDEN,
        ),
        // A core failure is answered as `/mcp` answers it (it was a 404 whatever it was).
        (
            OpsError::Core(CoreError::Store("store down".into())),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ];
    for (error, status) in cases {
        let text = error.to_string();
        let response = error.into_response();
        assert_eq!(response.status(), status, "{text}");
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, json!({ "error": text }));
    }
}
