//! The chaos harness: real masters and store nodes in network namespaces,
//! faults, history recording and checkers. Not built yet: see issue "Chaos harness".
