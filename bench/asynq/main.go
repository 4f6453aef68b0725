package main

import _ "github.com/hibiken/asynq"

func main() {}
