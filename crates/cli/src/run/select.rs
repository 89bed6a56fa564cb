//! Waiting for the first of several futures (the stop signals).

#[allow(unused_imports)]
use super::*;

/// The first of several futures to finish.
pub(super) async fn futures_select_first<F: std::future::Future + Unpin>(
    futures: impl Iterator<Item = F>,
) -> F::Output {
    let mut all: Vec<F> = futures.collect();
    std::future::poll_fn(move |cx| {
        for f in all.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}
