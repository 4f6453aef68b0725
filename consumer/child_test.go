package consumer_test

const childEnv = "WORQR_CONSUMER_CHILD"

func childMain() int { return 0 }
