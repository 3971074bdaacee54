"""The app's screens: chat (default), pair picker, speed demo, settings, help, saved chats."""
