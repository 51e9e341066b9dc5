"""FedAvg on a co3cli built-in task with co3cli-compressed uploads (a Flower App)."""
