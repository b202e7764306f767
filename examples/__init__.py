"""Example tasks and configs of the README section "Your own task and algorithm"."""
