//! The deploying guide's roles, for the tests that run as them.

use crate::TestDb;

impl TestDb {
    /// The deploying guide's two SQL blocks of roles and grants (as a superuser, then as the
    /// owner), for this database and roles named after it (`<db>_owner`, `<db>_worker`,
    /// `<db>_dashboard`).
    pub fn deploying_guide_grants(&self) -> [String; 2] {
        let guide =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide/deploying.md"))
                .expect("read the deploying guide");
        let after = guide.split("<!-- roles:").nth(1).expect("the guide marks its grants");
        let blocks: Vec<&str> =
            after.split("```sql\n").skip(1).map(|b| b.split("```").next().unwrap_or_default()).collect();
        let ours = |sql: &str| {
            sql.replace("queue_db", &self.name)
                .replace("queue_owner", &format!("{}_owner", self.name))
                .replace("queue_worker", &format!("{}_worker", self.name))
                .replace("queue_dashboard", &format!("{}_dashboard", self.name))
        };
        [ours(blocks[0]), ours(blocks[1])]
    }
}
