"""What the facts mean, once per look (the rooms are listed in `accelhost.hygiene`)."""
