/** The transport contract (`suite.ts`) on the SQL transport over the local PostgreSQL and MariaDB. */
import { sql } from "./backends.js"
import { transportContract } from "./suite.js"

transportContract(sql("postgres"))
transportContract(sql("mysql"))
