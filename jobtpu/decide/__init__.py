"""Pure decisions: what a pass does given what it saw, rules, fit and reachability."""
