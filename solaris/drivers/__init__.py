"""What runs the whole cycle many times: the replay of a time range and the knowledge-transfer evaluation."""
