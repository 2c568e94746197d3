"""What the doctor reads, once per look (the rooms are listed in `accelhost.hygiene`)."""
