package preflight

// connectionChecks are the checks that open connections (registry,
// external databases). Each lives in its own conn_*.go file.
func connectionChecks() []Check {
	return []Check{
		registryCheck(),
		signaturesCheck(),
		mongodbCheck(minMongoDB),
		postgresqlCheck(minPostgreSQL),
		redisCheck(minRedis),
		rabbitmqCheck(minRabbitMQ),
		backupCheck(),
	}
}
