"""The end of the turn, decided in one place (issue 50): what the household says, and how it sounds."""
