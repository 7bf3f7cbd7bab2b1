//! Futures that release database connections inside the runtime they were made on.
//!
//! An actor's futures are dropped with its arbiter, after the arbiter's runtime has stopped
//! and outside its context. A future dropped mid-query still holds a pooled connection, whose
//! drop hands it back to the pool through the runtime; with no runtime current that panics,
//! and a second such drop during the unwinding aborts the process. [`InRuntime::in_runtime`]
//! enters the runtime the future was made on while dropping it, so the hand-back is simply
//! cancelled with the stopped runtime.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

/// An arbiter (a thread with a runtime of its own), stopped with everything on it when this is
/// dropped.
pub struct ArbiterGuard(Option<actix::Arbiter>);

impl ArbiterGuard {
    pub fn new(arbiter: actix::Arbiter) -> ArbiterGuard {
        ArbiterGuard(Some(arbiter))
    }

    /// Starts the actor `make` builds on an arbiter of its own (made there), with the guard
    /// that stops that arbiter.
    pub fn start_actor<A>(
        make: impl FnOnce() -> A + Send + 'static,
    ) -> (actix::Addr<A>, ArbiterGuard)
    where
        A: actix::Actor<Context = actix::Context<A>>,
    {
        let arbiter = actix::Arbiter::new();
        let addr = A::start_in_arbiter(&arbiter.handle(), move |_| make());
        (addr, ArbiterGuard::new(arbiter))
    }

    /// Spawns the future made by `make` on this arbiter, made there (so it is dropped inside
    /// that runtime, see [`InRuntime`]).
    pub fn spawn_made_there<F>(&self, make: impl FnOnce() -> F + Send + 'static)
    where
        F: Future<Output = ()> + 'static,
    {
        if let Some(arbiter) = &self.0 {
            arbiter.spawn_fn(move || {
                actix::spawn(make().in_runtime());
            });
        }
    }
}

impl Drop for ArbiterGuard {
    fn drop(&mut self) {
        if let Some(arbiter) = self.0.take() {
            arbiter.stop();
        }
    }
}

/// A future dropped inside the runtime it was made on.
pub struct WithRuntime<F> {
    handle: Option<tokio::runtime::Handle>,
    inner: Option<Pin<Box<F>>>,
}

impl<F: Future> Future for WithRuntime<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.inner.as_mut() {
            Some(inner) => inner.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl<F> Drop for WithRuntime<F> {
    fn drop(&mut self) {
        let _entered = self.handle.as_ref().map(|handle| handle.enter());
        drop(self.inner.take());
    }
}

pub trait InRuntime: Future + Sized {
    /// This future, dropped inside the runtime current now (if any).
    fn in_runtime(self) -> WithRuntime<Self> {
        WithRuntime {
            handle: tokio::runtime::Handle::try_current().ok(),
            inner: Some(Box::pin(self)),
        }
    }
}

impl<F: Future> InRuntime for F {}

/// A value dropped inside the runtime it was bound to, like a future made [`InRuntime`]: an
/// actor's field whose drop needs that runtime (a mail transport's connection pool hands its
/// connections back through it) when the actor is dropped with its stopped arbiter.
pub struct DroppedInRuntime<T> {
    value: Option<T>,
    handle: Option<tokio::runtime::Handle>,
}

impl<T> DroppedInRuntime<T> {
    pub fn new(value: T) -> DroppedInRuntime<T> {
        DroppedInRuntime {
            value: Some(value),
            handle: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Binds it to the runtime current now (an actor's, once started on its arbiter).
    pub fn bind(&mut self) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            self.handle = Some(handle);
        }
    }

    pub fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }
}

impl<T> Drop for DroppedInRuntime<T> {
    fn drop(&mut self) {
        let _entered = self.handle.as_ref().map(|handle| handle.enter());
        drop(self.value.take());
    }
}

#[cfg(test)]
mod tests {
    use super::InRuntime;

    #[test]
    fn a_future_is_dropped_inside_the_runtime_it_was_made_on() {
        struct NeedsRuntime;
        impl Drop for NeedsRuntime {
            fn drop(&mut self) {
                assert!(tokio::runtime::Handle::try_current().is_ok());
            }
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let held = NeedsRuntime;
        let future = {
            let _entered = runtime.enter();
            async move {
                let _held = held;
                std::future::pending::<()>().await
            }
            .in_runtime()
        };
        drop(runtime);
        assert!(tokio::runtime::Handle::try_current().is_err());
        drop(future);
    }
}
