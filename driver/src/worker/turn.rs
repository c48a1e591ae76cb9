//! Taking turns: which source of inputs the loop looks at first, and when it yields.

use formica_core::worker::Input;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Where the loop looks for a ready input.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source {
    Timer,
    Queries,
    Channel,
}

/// Inputs taken in a row without waiting, before the loop yields to the runtime once.
const BUDGET: u32 = 64;

/// Whose turn it is to be looked at first, and how much of the budget is left.
#[derive(Debug, Default)]
pub(super) struct Turn {
    first: usize,
    taken: u32,
}

impl Turn {
    const SOURCES: [Source; 3] = [Source::Timer, Source::Queries, Source::Channel];

    /// The first ready input, looking at the sources in turn from the one after the source
    /// that gave the last input.
    pub(super) fn next(&mut self, mut ready: impl FnMut(Source) -> Option<Input>) -> Option<Input> {
        for i in 0..Self::SOURCES.len() {
            let at = (self.first + i) % Self::SOURCES.len();
            if let Some(input) = ready(Self::SOURCES[at]) {
                self.first = (at + 1) % Self::SOURCES.len();
                self.taken += 1;
                return Some(input);
            }
        }
        None
    }

    /// Whether the budget is spent (it then starts over).
    pub(super) fn spent(&mut self) -> bool {
        let spent = self.taken >= BUDGET;
        if spent {
            self.taken = 0;
        }
        spent
    }

    /// The loop waited: the budget starts over.
    pub(super) fn rested(&mut self) {
        self.taken = 0;
    }
}

/// Pending once, waking itself at once: the runtime runs other tasks in between.
pub(super) struct YieldNow(pub(super) bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
