//! `PlanFile`: which of a tenant's two files a request is about, and its permissions.

/// One of the two files every tenant has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanFile {
    Integration,
    Configuration,
}

impl PlanFile {
    pub const ALL: [PlanFile; 2] = [PlanFile::Integration, PlanFile::Configuration];

    /// The file's path at the root of the tenant repository.
    pub fn path(self) -> &'static str {
        match self {
            PlanFile::Integration => "integrations.yml",
            PlanFile::Configuration => "configuration.yml",
        }
    }

    /// Permission that allows replacing the file (and reading it).
    pub fn write_permission(self) -> &'static str {
        match self {
            PlanFile::Integration => "jit.integrations.write",
            PlanFile::Configuration => "jit.preferences.write",
        }
    }

    /// Permission that allows reading the file.
    pub fn read_permission(self) -> &'static str {
        match self {
            PlanFile::Integration => "jit.integrations.read",
            PlanFile::Configuration => "jit.preferences.read",
        }
    }

    /// The file's name in URLs and in the parts of `POST /plans/commits`.
    pub fn part_name(self) -> &'static str {
        match self {
            PlanFile::Integration => "integration-file",
            PlanFile::Configuration => "configuration-file",
        }
    }

    /// Label used in metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            PlanFile::Integration => "integration",
            PlanFile::Configuration => "configuration",
        }
    }
}
