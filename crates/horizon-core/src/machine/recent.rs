//! A bounded log, newest last: the brain's recent decisions and the console's timeline are
//! parts of the core machine of this shape (`/status` shows them newest first).

use std::collections::VecDeque;

#[derive(Debug)]
pub(crate) struct Recent<T> {
    items: VecDeque<T>,
    cap: usize,
}

impl<T> Recent<T> {
    /// An empty log keeping at most `cap` items.
    pub(crate) fn new(cap: usize) -> Self {
        Recent { items: VecDeque::new(), cap }
    }

    /// Adds `item`, forgetting the oldest beyond the bound.
    pub(crate) fn push(&mut self, item: T) {
        self.items.push_back(item);
        while self.items.len() > self.cap {
            self.items.pop_front();
        }
    }

    /// The items, newest first.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = &T> {
        self.items.iter().rev()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_come_first_and_the_oldest_go_beyond_the_bound() {
        let mut log = Recent::new(3);
        for i in 0..5 {
            log.push(i);
        }
        assert_eq!(log.newest_first().copied().collect::<Vec<_>>(), [4, 3, 2]);
    }
}
